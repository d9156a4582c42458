#ifndef AMPD_ENGINE_OPS_GRAD_UTIL_H_
#define AMPD_ENGINE_OPS_GRAD_UTIL_H_

// What the ops' gradients share. Internal to engine/ops.

#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/core/tensor.h"

namespace ampd::engine::ops::internal {

// Gradient of a broadcast operand: reduce back to its own shape.
inline Tensor ReduceTo(const Tensor& grad, const Tensor& like) {
  if (like.numel() == grad.numel()) return grad;
  if (like.numel() == 1)
    return backend::Kernel<backend::SumAllKernel>(grad.device())(grad, like.dtype());
  return backend::Kernel<backend::SumRowsKernel>(grad.device())(grad, like.dtype());
}

inline Tensor AsDType(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : backend::Kernel<backend::CastKernel>(t.device())(t, dtype);
}

}  // namespace ampd::engine::ops::internal

#endif  // AMPD_ENGINE_OPS_GRAD_UTIL_H_
