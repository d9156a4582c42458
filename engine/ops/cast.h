#ifndef AMPD_ENGINE_OPS_CAST_H_
#define AMPD_ENGINE_OPS_CAST_H_

// The differentiable dtype conversion (autocast casts through it).

#include "engine/core/tensor.h"

namespace ampd::engine {

Tensor Cast(const Tensor& x, DType dtype);

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_OPS_CAST_H_
