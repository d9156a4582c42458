#ifndef AMPD_ENGINE_OPS_DROPOUT_H_
#define AMPD_ENGINE_OPS_DROPOUT_H_

// Inverted dropout with a counter-based mask (same seed, same mask).

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// Inverted dropout; identity when !training or p == 0. Same seed, same mask.
Tensor Dropout(Tensor x, double p, uint64_t seed, bool training);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_DROPOUT_H_
