#include "engine/data/batcher.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>

namespace ampd::engine::data {
namespace {

// Written out rather than taken from <random>: the permutation is part of a
// checkpoint's meaning and must not change with the standard library.
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias: draws below 2^64 mod bound are
// rejected so that the accepted range is a whole number of bounds.
uint64_t UniformBelow(uint64_t bound, uint64_t* state) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = SplitMix64(state);
    if (r >= threshold) return r % bound;
  }
}

// Examples served per epoch: drop_last leaves out the partial tail batch.
int64_t EpochEnd(int64_t num_examples, int64_t batch_size, bool drop_last) {
  return drop_last ? num_examples / batch_size * batch_size : num_examples;
}

}  // namespace

Batcher::Batcher(const Dataset* dataset, int64_t batch_size, uint64_t seed, bool shuffle,
                 bool drop_last)
    : dataset_(dataset),
      // The constructor cannot report an error; a zero batch would never
      // advance, so a bad size degrades to 1 instead.
      batch_size_(std::max<int64_t>(batch_size, 1)),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last) {}

int64_t Batcher::batches_per_epoch() const {
  const int64_t n = dataset_->num_examples;
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

void Batcher::Permute(int64_t epoch) {
  const int64_t n = dataset_->num_examples;
  order_.resize(static_cast<size_t>(n));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (shuffle_) {
    // Mixing the seed before adding the epoch keeps (seed, epoch) pairs apart:
    // (1, 2) and (2, 1) get unrelated streams.
    uint64_t state = seed_;
    state = SplitMix64(&state) ^ static_cast<uint64_t>(epoch);
    for (int64_t i = n - 1; i > 0; --i) {
      const uint64_t j = UniformBelow(static_cast<uint64_t>(i) + 1, &state);
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
    }
  }
  permuted_epoch_ = epoch;
}

void Batcher::Seek(Position position) {
  position_.epoch = std::max<int64_t>(position.epoch, 0);
  position_.index = std::max<int64_t>(position.index, 0);
  // A position at (or past) the last batch of an epoch is the start of the
  // next one; Next leaves positions in that form too.
  const int64_t end = EpochEnd(dataset_->num_examples, batch_size_, drop_last_);
  if (end > 0 && position_.index >= end) {
    ++position_.epoch;
    position_.index = 0;
  }
}

void Batcher::Next(Batch* batch) {
  const int64_t end = EpochEnd(dataset_->num_examples, batch_size_, drop_last_);
  // Nothing to serve (an empty set, or drop_last with fewer examples than one
  // batch): an empty batch rather than a loop that never finds one.
  if (end == 0) {
    batch->size = 0;
    batch->features.clear();
    batch->labels.clear();
    batch->rows.clear();
    return;
  }
  if (position_.index >= end) {
    ++position_.epoch;
    position_.index = 0;
  }
  if (permuted_epoch_ != position_.epoch) Permute(position_.epoch);

  const int64_t dim = dataset_->feature_dim;
  const int64_t size = std::min(batch_size_, end - position_.index);
  batch->size = size;
  batch->epoch = position_.epoch;
  batch->features.resize(gather_features_ ? static_cast<size_t>(size * dim) : 0);
  batch->labels.resize(static_cast<size_t>(size));
  batch->rows.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const int64_t example = order_[static_cast<size_t>(position_.index + i)];
    if (gather_features_) {
      std::copy_n(dataset_->features.begin() + example * dim, dim,
                  batch->features.begin() + i * dim);
    }
    batch->labels[static_cast<size_t>(i)] = dataset_->labels[static_cast<size_t>(example)];
    batch->rows[static_cast<size_t>(i)] = static_cast<int32_t>(example);
  }
  position_.index += size;
  if (position_.index >= end) {
    ++position_.epoch;
    position_.index = 0;
  }
}

}  // namespace ampd::engine::data
