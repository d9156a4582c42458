// The CUDA backend: batch norm and its gradient (kernels/batch_norm.cu).

#include "engine/backend/kernels/batch_norm.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::BatchNormBackwardKernel;
using backend::BatchNormGrads;
using backend::BatchNormKernel;
using backend::BatchNormResult;

namespace {
int64_t Inner(const Tensor& x) { return x.numel() / std::max<int64_t>(1, x.dim(0) * x.dim(1)); }
}  // namespace

BatchNormResult CudaBackend::BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& running_mean, const Tensor& running_var,
                                       bool training, double momentum, double eps, DType out) {
  const DType stat = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const int64_t c = x.dim(1);
  BatchNormResult r{Allocate(x.shape(), out, false), Allocate({c}, stat, false),
                    Allocate({c}, stat, false)};
  if (Ok()) {
    // running_var shares running_mean's dtype (the models make both f32).
    Record(LaunchBatchNorm(x.raw(), Dt(x), gamma.raw(), Dt(gamma), beta.raw(), x.dim(0), c,
                           Inner(x), running_mean.raw(), running_var.raw(), Dt(running_mean),
                           training, momentum, eps, r.y.raw(), Dt(out), r.mean.raw(), r.rstd.raw(),
                           Dt(stat), S()));
  }
  return r;
}

BatchNormGrads CudaBackend::BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                              const Tensor& mean, const Tensor& rstd,
                                              const Tensor& dy, bool training) {
  const int64_t c = x.dim(1);
  BatchNormGrads g{Allocate(x.shape(), x.dtype(), false), Allocate({c}, gamma.dtype(), false),
                   Allocate({c}, gamma.dtype(), false)};
  if (Ok()) {
    Record(LaunchBatchNormBackward(x.raw(), Dt(x), gamma.raw(), Dt(gamma), mean.raw(), rstd.raw(),
                                   Dt(mean), dy.raw(), Dt(dy), x.dim(0), c, Inner(x), training,
                                   g.dx.raw(), g.dgamma.raw(), g.dbeta.raw(), S()));
  }
  return g;
}

AMPD_CUDA_KERNEL(BatchNormKernel, BatchNorm);
AMPD_CUDA_KERNEL(BatchNormBackwardKernel, BatchNormBackward);

}  // namespace ampd::engine::cuda
