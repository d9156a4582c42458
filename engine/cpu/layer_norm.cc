// The CPU backend: LayerNorm forward and backward over the last dim.

#include "engine/backend/kernels/layer_norm.h"

#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"

namespace ampd::engine::cpu {

using backend::KernelMethod;
using backend::LayerNormBackwardKernel;
using backend::LayerNormGrads;
using backend::LayerNormKernel;
using backend::LayerNormResult;

LayerNormResult CpuBackendImpl::LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          double eps, DType out) {
  return UsesDouble(x) ? LayerNormImpl<double>(x, gamma, beta, eps, out)
                       : LayerNormImpl<float>(x, gamma, beta, eps, out);
}

template <typename C>
LayerNormResult CpuBackendImpl::LayerNormImpl(const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, double eps, DType out) {
  const int64_t cols = x.dim(-1), rows = Rows(x);
  const DType stat = std::is_same_v<C, double> ? DType::kF64 : DType::kF32;
  Values<C> xv(x), gv(gamma), bv(beta);
  Output<C> y(x.shape(), out), mean({rows}, stat), rstd({rows}, stat);
  for (int64_t r = 0; r < rows; ++r) {
    const C* xr = xv.data() + r * cols;
    C mu = 0;
    for (int64_t c = 0; c < cols; ++c) mu += xr[c];
    mu /= cols;
    C var = 0;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    var /= cols;
    const C rs = C(1) / std::sqrt(var + C(eps));
    mean[r] = mu;
    rstd[r] = rs;
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = (xr[c] - mu) * rs * gv[c] + bv[c];
  }
  return {y.Finish(), mean.Finish(), rstd.Finish()};
}

LayerNormGrads CpuBackendImpl::LayerNormBackward(const Tensor& x, const Tensor& gamma,
                                                 const LayerNormResult& fwd, const Tensor& dy) {
  return UsesDouble(x) ? LayerNormBackwardImpl<double>(x, gamma, fwd, dy)
                       : LayerNormBackwardImpl<float>(x, gamma, fwd, dy);
}

template <typename C>
LayerNormGrads CpuBackendImpl::LayerNormBackwardImpl(const Tensor& x, const Tensor& gamma,
                                                     const LayerNormResult& fwd, const Tensor& dy) {
  const int64_t cols = x.dim(-1), rows = Rows(x);
  Values<C> xv(x), gv(gamma), dv(dy), mv(fwd.mean), rv(fwd.rstd);
  Output<C> dx(x.shape(), x.dtype());
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * cols;
    C sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const C xhat = (xv[o + c] - mv[r]) * rv[r];
      const C g = dv[o + c] * gv[c];
      sum_g += g;
      sum_gx += g * xhat;
      dg[c] += dv[o + c] * xhat;
      db[c] += dv[o + c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      const C xhat = (xv[o + c] - mv[r]) * rv[r];
      dx[o + c] = rv[r] * (dv[o + c] * gv[c] - (sum_g + xhat * sum_gx) / cols);
    }
  }
  return {dx.Finish(), Tensor::FromDoubles(dg, {cols}, gamma.dtype()),
          Tensor::FromDoubles(db, {cols}, gamma.dtype())};
}

AMPD_REGISTER_KERNEL(LayerNormKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::LayerNorm>::Call);
AMPD_REGISTER_KERNEL(LayerNormBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::LayerNormBackward>::Call);

}  // namespace ampd::engine::cpu
