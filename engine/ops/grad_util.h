#ifndef AMPD_ENGINE_OPS_GRAD_UTIL_H_
#define AMPD_ENGINE_OPS_GRAD_UTIL_H_

// What the ops' gradients share. Internal to engine/ops.

#include "engine/backend/backend.h"
#include "engine/core/tensor.h"

namespace ampd::engine::ops_internal {

// Gradient of a broadcast operand: reduce back to its own shape.
inline Tensor ReduceTo(const Tensor& grad, const Tensor& like) {
  Backend& be = BackendOf(grad);
  if (like.numel() == grad.numel()) return grad;
  if (like.numel() == 1) {
    Tensor s = be.SumAll(grad, like.dtype());
    return s;
  }
  return be.SumRows(grad, like.dtype());
}

inline Tensor AsDType(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : BackendOf(t).Cast(t, dtype);
}

}  // namespace ampd::engine::ops_internal

#endif  // AMPD_ENGINE_OPS_GRAD_UTIL_H_
