// The CPU backend: LayerNorm forward and backward over the last dim.

#include "engine/backend/kernels/layer_norm.h"

#include "engine/cpu/avx512_math.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

using backend::KernelMethod;
using backend::LayerNormBackwardKernel;
using backend::LayerNormGrads;
using backend::LayerNormKernel;
using backend::LayerNormResult;

namespace {

#ifdef AMPD_HAS_AVX512_KERNELS
// dgamma and dbeta of columns [c0, c0 + 16 G): per column, in row order and
// in double, dy * xhat (a float product) and dy, exactly as the portable
// loop adds them, with the 4G double accumulators in registers.
template <int G>
AMPD_AVX512 void GammaBetaGradsAvx512(const float* x, const float* dy, const float* mean,
                                      const float* rstd, int64_t rows, int64_t cols, int64_t c0,
                                      double* dg, double* db) {
  __m512d g_acc[2 * G], b_acc[2 * G];
#pragma GCC unroll 8
  for (int i = 0; i < 2 * G; ++i) g_acc[i] = b_acc[i] = _mm512_setzero_pd();
  auto halves = [](__m512 v, __m512d* lo, __m512d* hi) AMPD_AVX512 {
    *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols + c0;
    const float* gr = dy + r * cols + c0;
    const __m512 m = _mm512_set1_ps(mean[r]), rs = _mm512_set1_ps(rstd[r]);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m512 d = _mm512_loadu_ps(gr + 16 * g);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xr + 16 * g), m), rs);
      __m512d lo, hi;
      halves(_mm512_mul_ps(d, xhat), &lo, &hi);
      g_acc[2 * g] = _mm512_add_pd(g_acc[2 * g], lo);
      g_acc[2 * g + 1] = _mm512_add_pd(g_acc[2 * g + 1], hi);
      halves(d, &lo, &hi);
      b_acc[2 * g] = _mm512_add_pd(b_acc[2 * g], lo);
      b_acc[2 * g + 1] = _mm512_add_pd(b_acc[2 * g + 1], hi);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 2 * G; ++i) {
    _mm512_storeu_pd(dg + c0 + 8 * i, g_acc[i]);
    _mm512_storeu_pd(db + c0 + 8 * i, b_acc[i]);
  }
}

AMPD_AVX512 void GammaBetaSliceAvx512(const float* x, const float* dy, const float* mean,
                                      const float* rstd, int64_t rows, int64_t cols, int64_t c0,
                                      int64_t width, double* dg, double* db) {
  static_assert(kColumnSlice == 64, "up to four 16-column groups");
  switch (width / 16) {
    case 1:
      return GammaBetaGradsAvx512<1>(x, dy, mean, rstd, rows, cols, c0, dg, db);
    case 2:
      return GammaBetaGradsAvx512<2>(x, dy, mean, rstd, rows, cols, c0, dg, db);
    case 3:
      return GammaBetaGradsAvx512<3>(x, dy, mean, rstd, rows, cols, c0, dg, db);
    default:
      return GammaBetaGradsAvx512<4>(x, dy, mean, rstd, rows, cols, c0, dg, db);
  }
}
#endif

}  // namespace

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
#ifdef AMPD_HAS_AVX512_KERNELS
    if constexpr (std::is_same_v<C, float>) {
      if (cols % 16 == 0 && UseAvx512Kernels()) {
        return GammaBetaSliceAvx512(xp, dyp, mv.data(), rv.data(), rows, cols, c0, c1 - c0,
                                    dg.data(), db.data());
      }
    }
#endif
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
