#ifndef AMPD_ENGINE_OPS_DROPOUT_H_
#define AMPD_ENGINE_OPS_DROPOUT_H_

// Inverted dropout with a counter-based mask (same seed, same mask).

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// Inverted dropout; identity when !training or p == 0. Same seed, same mask.
Tensor Dropout(Tensor x, double p, uint64_t seed, bool training);

// Data parallelism: this thread's forward holds samples [first, first +
// count) of a global batch, every tensor's leading rows being those samples'
// in order. Within the scope every dropout mask (Dropout's and attention's)
// is the one a forward of the whole batch would apply to these samples, so
// that the ranks train as one worker with the global batch would (and do not
// each draw the same mask for their own samples).
class DropoutShardScope {
 public:
  DropoutShardScope(int64_t first, int64_t count);
  ~DropoutShardScope();
  DropoutShardScope(const DropoutShardScope&) = delete;
  DropoutShardScope& operator=(const DropoutShardScope&) = delete;

 private:
  int64_t saved_first_, saved_count_;
};

// The seed of a mask of `elements` values over this forward's samples: seed
// itself outside a DropoutShardScope; inside one, seed moved to the samples'
// place in the global batch (backend::DropoutSeedAt by first samples'
// worth of elements).
uint64_t ShardDropoutSeed(uint64_t seed, int64_t elements);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_DROPOUT_H_
