#include "engine/data/token_windows.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ampd::engine::data {
namespace {

uint64_t SplitMix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void CopyWindow(const TokenSequence& s, int64_t start, int64_t block, int32_t* inputs,
                int32_t* targets) {
  for (int64_t t = 0; t < block; ++t) {
    inputs[t] = static_cast<int32_t>(s[start + t]);
    targets[t] = static_cast<int32_t>(s[start + t + 1]);
  }
}

}  // namespace

absl::StatusOr<TokenWindows> TokenWindows::Create(std::vector<const TokenSequence*> shards,
                                                  int64_t block_size, uint64_t seed) {
  if (block_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("block_size must be >= 1, got ", block_size));
  }
  TokenWindows w;
  w.block_ = block_size;
  w.seed_ = seed;
  const TokenSequence* longest = nullptr;
  for (const TokenSequence* s : shards) {
    if (longest == nullptr || s->size() > longest->size()) longest = s;
    w.first_window_.push_back(w.total_windows_);
    // Starts 0 .. size - block - 1: each window needs block + 1 tokens.
    w.total_windows_ += std::max<int64_t>(0, s->size() - block_size);
  }
  if (w.total_windows_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no training window of block_size + 1 = ", block_size + 1, " tokens fits: the longest ",
        "token sequence", longest && !longest->name().empty() ? " (" + longest->name() + ")" : "",
        " has ", longest ? longest->size() : 0));
  }
  w.shards_ = std::move(shards);
  return w;
}

std::pair<int, int64_t> TokenWindows::WindowStart(int64_t k) const {
  // A 64-bit hash scaled to [0, total) by a 128-bit multiply (no modulo bias
  // worth the name: total is far below 2^64).
  const uint64_t h = SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(k)));
  const int64_t g = static_cast<int64_t>(
      (static_cast<unsigned __int128>(h) * static_cast<uint64_t>(total_windows_)) >> 64);
  const int shard = static_cast<int>(
      std::upper_bound(first_window_.begin(), first_window_.end(), g) - first_window_.begin() - 1);
  return {shard, g - first_window_[shard]};
}

TokenBatch TokenWindows::Next(int64_t batch) {
  TokenBatch b;
  b.batch = batch;
  b.block = block_;
  b.inputs.resize(batch * block_);
  b.targets.resize(batch * block_);
  for (int64_t i = 0; i < batch; ++i) {
    const auto [shard, start] = WindowStart(position_++);
    CopyWindow(*shards_[shard], start, block_, &b.inputs[i * block_], &b.targets[i * block_]);
  }
  return b;
}

std::vector<TokenBatch> EvalWindows(const TokenSequence& tokens, int64_t block_size, int64_t batch,
                                    int64_t max_windows) {
  std::vector<TokenBatch> out;
  if (block_size < 1 || batch < 1) return out;
  int64_t windows = tokens.size() > block_size ? (tokens.size() - 1) / block_size : 0;
  if (max_windows > 0) windows = std::min(windows, max_windows);
  for (int64_t first = 0; first < windows; first += batch) {
    TokenBatch b;
    b.batch = std::min(batch, windows - first);
    b.block = block_size;
    b.inputs.resize(b.batch * block_size);
    b.targets.resize(b.batch * block_size);
    for (int64_t i = 0; i < b.batch; ++i) {
      CopyWindow(tokens, (first + i) * block_size, block_size, &b.inputs[i * block_size],
                 &b.targets[i * block_size]);
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace ampd::engine::data
