#ifndef AMPD_ENGINE_OPS_SOFTMAX_H_
#define AMPD_ENGINE_OPS_SOFTMAX_H_

// Softmax and log-softmax along the last dim (f32 under autocast).

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// pow(x, 2)
Tensor Softmax(Tensor x);  // along the last dim
// along the last dim
Tensor LogSoftmax(Tensor x);  // along the last dim

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_SOFTMAX_H_
