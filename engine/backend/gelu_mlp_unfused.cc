// The unfused forms of the GELU MLP kernels (kernels/gelu_mlp.h): the CPU's
// kernels, and a device's where it has no fused form.

#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/gelu_mlp.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/backend/kernels/reductions.h"

namespace ampd::engine::backend {

LinearGeluTanhResult LinearGeluTanhUnfused(const Tensor& x, const Tensor& w, const Tensor& b,
                                           DType out) {
  Tensor pre = Kernel<LinearKernel>(x.device())(x, w, b, out);
  return {Kernel<UnaryKernel>(x.device())(OpId::kGeluTanh, pre), pre};
}

DGeluTanhResult MatmulDGeluTanhUnfused(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                       bool bias_grad, DType bias_dtype) {
  const Tensor dh = Kernel<MatmulKernel>(dy.device())(dy, w, false, false, pre.dtype());
  Tensor dpre = Kernel<UnaryBackwardKernel>(dy.device())(OpId::kGeluTanh, pre, dh);
  Tensor dbias = bias_grad ? Kernel<SumRowsKernel>(dy.device())(dpre, bias_dtype) : Tensor();
  return {std::move(dpre), std::move(dbias)};
}

}  // namespace ampd::engine::backend
