#ifndef AMPD_ENGINE_OPS_CROSS_ENTROPY_H_
#define AMPD_ENGINE_OPS_CROSS_ENTROPY_H_

// The mean softmax cross-entropy (f32 under autocast).

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// Mean cross-entropy of softmax(logits) against labels, computed in f32.
Tensor SoftmaxCrossEntropy(Tensor logits, const std::vector<int32_t>& labels);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_CROSS_ENTROPY_H_
