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
  const C* __restrict g = gv.data();
  const C* __restrict b = bv.data();
  C* __restrict yp = y.data();
  // Rows are independent: each is computed whole by one thread.
  ForRowChunks(rows, cols, [&](int64_t r) {
    const C* __restrict xr = xv.data() + r * cols;
    C mu = 0;
#pragma omp simd reduction(+ : mu)
    for (int64_t c = 0; c < cols; ++c) mu += xr[c];
    mu /= cols;
    C var = 0;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    var /= cols;
    const C rs = C(1) / std::sqrt(var + C(eps));
    mean[r] = mu;
    rstd[r] = rs;
    C* __restrict yr = yp + r * cols;
    AMPD_SIMD
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mu) * rs * g[c] + b[c];
  });
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
  const C* __restrict xp = xv.data();
  const C* __restrict g = gv.data();
  const C* __restrict dyp = dv.data();
  C* __restrict dxp = dx.data();
  // dx: rows are independent, each computed whole by one thread.
  ForRowChunks(rows, cols, [&](int64_t r) {
    const int64_t o = r * cols;
    const C m = mv[r], rs = rv[r];
    C sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < cols; ++c) {
      const C gc = dyp[o + c] * g[c];
      sum_g += gc;
      sum_gx += gc * ((xp[o + c] - m) * rs);
    }
    AMPD_SIMD
    for (int64_t c = 0; c < cols; ++c) {
      const C xhat = (xp[o + c] - m) * rs;
      dxp[o + c] = rs * (dyp[o + c] * g[c] - (sum_g + xhat * sum_gx) / cols);
    }
  });
  // dgamma, dbeta: each column summed over the rows in order, in double, by
  // the one thread that owns its slice of columns (so the sums do not depend
  // on the thread count).
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  ForColumnSlices(rows, cols, [&](int64_t c0, int64_t c1) {
    double* __restrict dgp = dg.data();
    double* __restrict dbp = db.data();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * cols;
      const C m = mv[r], rs = rv[r];
      AMPD_SIMD
      for (int64_t c = c0; c < c1; ++c) {
        dgp[c] += dyp[o + c] * ((xp[o + c] - m) * rs);
        dbp[c] += dyp[o + c];
      }
    }
  });
  return {dx.Finish(), Tensor::FromDoubles(dg, {cols}, gamma.dtype()),
          Tensor::FromDoubles(db, {cols}, gamma.dtype())};
}

AMPD_REGISTER_KERNEL(LayerNormKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::LayerNorm>::Call);
AMPD_REGISTER_KERNEL(LayerNormBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::LayerNormBackward>::Call);

}  // namespace ampd::engine::cpu
