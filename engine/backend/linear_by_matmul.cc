// The unfused Linear (kernels/matmul.h): for backends, and shapes, without a
// fused bias epilogue.

#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/matmul.h"

namespace ampd::engine::backend {

Tensor LinearByMatmul(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
  Tensor y = Kernel<MatmulKernel>(x.device())(x, w, false, true, out);
  return b.defined() ? Kernel<BinaryKernel>(x.device())(OpId::kAdd, y, b, out) : y;
}

}  // namespace ampd::engine::backend
