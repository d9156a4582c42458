#ifndef AMPD_ENGINE_DATA_BATCHER_H_
#define AMPD_ENGINE_DATA_BATCHER_H_

#include <cstdint>
#include <vector>

#include "engine/data/dataset.h"

namespace ampd::engine::data {

struct Batch {
  int64_t size = 0;
  std::vector<float> features;  // size * feature_dim (empty when not gathered)
  std::vector<int32_t> labels;  // size
  std::vector<int32_t> rows;    // size: each example's index in the dataset
  int64_t epoch = 0;            // the epoch the examples are drawn in
};

// Seeded shuffling and batching over epochs. The order of epoch e depends only
// on (seed, e), so a position can be saved and restored exactly (checkpoints).
class Batcher {
 public:
  struct Position {
    int64_t epoch = 0;
    int64_t index = 0;  // next example within the epoch's permutation
  };

  // `dataset` must outlive the Batcher. batch_size >= 1.
  Batcher(const Dataset* dataset, int64_t batch_size, uint64_t seed, bool shuffle = true,
          bool drop_last = true);

  // Fills the next batch, moving to the next epoch when this one is exhausted.
  // The last batch of an epoch is smaller unless drop_last. When an epoch has
  // no batch at all (no examples, or drop_last with fewer than batch_size) the
  // batch is empty (size 0).
  void Next(Batch* batch);
  // After an epoch's last batch the position is {epoch + 1, 0}.
  Position position() const { return position_; }
  // Restores a position from position(); the batches that follow are the
  // same as those that followed it then.
  void Seek(Position position);
  int64_t batches_per_epoch() const;
  // false: Next leaves `features` empty (the caller gathers the rows itself,
  // e.g. from a copy of the dataset on a device). Labels and rows are filled.
  void set_gather_features(bool gather) { gather_features_ = gather; }

 private:
  void Permute(int64_t epoch);

  const Dataset* dataset_;
  int64_t batch_size_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  bool gather_features_ = true;
  Position position_;
  int64_t permuted_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace ampd::engine::data

#endif  // AMPD_ENGINE_DATA_BATCHER_H_
