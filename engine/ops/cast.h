#ifndef AMPD_ENGINE_OPS_CAST_H_
#define AMPD_ENGINE_OPS_CAST_H_

// The differentiable dtype conversion (autocast casts through it).

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

Tensor Cast(const Tensor& x, DType dtype);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_CAST_H_
