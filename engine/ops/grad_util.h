#ifndef AMPD_ENGINE_OPS_GRAD_UTIL_H_
#define AMPD_ENGINE_OPS_GRAD_UTIL_H_

// What the ops' gradients share. Internal to engine/ops.

#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/core/tensor.h"

namespace ampd::engine::ops::internal {

// Gradient of a broadcast operand: reduce back to its own shape, summing into
// `dtype`.
inline Tensor ReduceTo(const Tensor& grad, const Tensor& like, DType dtype) {
  if (like.numel() == grad.numel()) return grad;
  if (like.numel() == 1) return backend::Kernel<backend::SumAllKernel>(grad.device())(grad, dtype);
  return backend::Kernel<backend::SumRowsKernel>(grad.device())(grad, dtype);
}

// Whether backward needs t's gradient: t is a leaf that asks for one, or the
// output of a recorded op. An input that is neither (a batch of images, a
// model's first activations) gets none, and its GEMM or convolution is
// skipped (as PyTorch's needs_input_grad does); the engine ignores an
// undefined gradient.
inline bool NeedsGrad(const Tensor& t) {
  return t.defined() && (t.requires_grad() || t.grad_fn() != nullptr);
}

inline Tensor AsDType(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : backend::Kernel<backend::CastKernel>(t.device())(t, dtype);
}

}  // namespace ampd::engine::ops::internal

#endif  // AMPD_ENGINE_OPS_GRAD_UTIL_H_
