// The CUDA backend: LayerNorm over the last dim and its gradient.

#include "engine/backend/kernels/layer_norm.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::LayerNormBackwardKernel;
using backend::LayerNormKernel;

engine::backend::LayerNormResult CudaBackend::LayerNorm(const Tensor& x, const Tensor& gamma,
                                                        const Tensor& beta, double eps, DType out) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  const DType stat = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  engine::backend::LayerNormResult r{Allocate(x.shape(), out, false), Allocate({rows}, stat, false),
                                     Allocate({rows}, stat, false)};
  if (Ok()) {
    Record(LaunchLayerNorm(x.raw(), Dt(x), gamma.raw(), Dt(gamma), beta.raw(), rows, cols, eps,
                           r.y.raw(), Dt(out), r.mean.raw(), r.rstd.raw(), Dt(stat), S()));
  }
  return r;
}

engine::backend::LayerNormGrads CudaBackend::LayerNormBackward(
    const Tensor& x, const Tensor& gamma, const engine::backend::LayerNormResult& fwd,
    const Tensor& dy) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  engine::backend::LayerNormGrads g{Allocate(x.shape(), x.dtype(), false),
                                    Allocate({cols}, gamma.dtype(), false),
                                    Allocate({cols}, gamma.dtype(), false)};
  Tensor scratch = Allocate({2 * ColumnSumScratch(rows, cols)}, DType::kF64, false);
  if (Ok()) {
    Record(LaunchLayerNormBackward(x.raw(), Dt(x), gamma.raw(), Dt(gamma), fwd.mean.raw(),
                                   fwd.rstd.raw(), Dt(fwd.mean), dy.raw(), Dt(dy), rows, cols,
                                   g.dx.raw(), g.dgamma.raw(), g.dbeta.raw(),
                                   static_cast<double*>(scratch.raw()), S()));
  }
  return g;
}

AMPD_CUDA_KERNEL(LayerNormKernel, LayerNorm);
AMPD_CUDA_KERNEL(LayerNormBackwardKernel, LayerNormBackward);

}  // namespace ampd::engine::cuda
