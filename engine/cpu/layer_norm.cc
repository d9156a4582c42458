// The CPU backend: LayerNorm forward and backward over the last dim.

#include "engine/backend/kernels/layer_norm.h"

#include <optional>
#include <type_traits>
#include <vector>

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

// This thread's buffer of at least `cols` floats: one row converted while it
// is in L1 (a bf16 y rounded, a bf16 dy widened).
float* RowScratch(int64_t cols) {
  thread_local std::vector<float> row;
  if (static_cast<int64_t>(row.size()) < cols) row.resize(cols);
  return row.data();
}

#ifdef AMPD_HAS_AVX512_KERNELS
// dg[c0, c1) and db[c0, c1) += per column, in row order and in double,
// dy * xhat (a float product) and dy, exactly as the portable loop adds
// them. As SumColumnsAvx512 (reductions.cc), the rows go by in blocks, all
// the range's columns for each, so memory is read in sequential streams.
constexpr int64_t kGradRowBlock = 8;

// dy is f32 or bf16 (a norm that fed a bf16 linear: ops/layer_norm.h), widened
// as it loads.
template <bool kBf16>
AMPD_AVX512 void GammaBetaGradsAvx512(const float* x, const void* dy_base, const float* mean,
                                      const float* rstd, int64_t rows, int64_t cols, int64_t c0,
                                      int64_t c1, double* dg, double* db) {
  using DyT = std::conditional_t<kBf16, uint16_t, float>;
  const DyT* dy = static_cast<const DyT*>(dy_base);
  auto halves = [](__m512 v, __m512d* lo, __m512d* hi) AMPD_AVX512 {
    *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  __m512 m[kGradRowBlock], rs[kGradRowBlock];
  for (int64_t r0 = 0; r0 < rows; r0 += kGradRowBlock) {
    const int64_t n = std::min(kGradRowBlock, rows - r0);
    for (int64_t k = 0; k < n; ++k) {
      m[k] = _mm512_set1_ps(mean[r0 + k]);
      rs[k] = _mm512_set1_ps(rstd[r0 + k]);
    }
    for (int64_t c = c0; c < c1; c += 16) {
      __m512d g_lo = _mm512_loadu_pd(dg + c), g_hi = _mm512_loadu_pd(dg + c + 8);
      __m512d b_lo = _mm512_loadu_pd(db + c), b_hi = _mm512_loadu_pd(db + c + 8);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t o = (r0 + k) * cols + c;
        const __m512 d = Load16<kBf16>(dy + o);
        const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + o), m[k]), rs[k]);
        __m512d lo, hi;
        halves(_mm512_mul_ps(d, xhat), &lo, &hi);
        g_lo = _mm512_add_pd(g_lo, lo);
        g_hi = _mm512_add_pd(g_hi, hi);
        halves(d, &lo, &hi);
        b_lo = _mm512_add_pd(b_lo, lo);
        b_hi = _mm512_add_pd(b_hi, hi);
      }
      _mm512_storeu_pd(dg + c, g_lo);
      _mm512_storeu_pd(dg + c + 8, g_hi);
      _mm512_storeu_pd(db + c, b_lo);
      _mm512_storeu_pd(db + c + 8, b_hi);
    }
  }
}

// Sum of 16-lane vectors v(0) ... v(n - 1) in four chains (vector i goes to
// chain i % 4), combined in a fixed order: the same bits on every thread.
template <typename V>
AMPD_AVX512 inline float SumVectors(int64_t n, const V& v) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (int64_t i = 0; i < n; ++i) a[i % 4] = _mm512_add_ps(a[i % 4], v(i));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

// One row of LayerNorm's forward, cols a multiple of 16: mean and variance
// as the portable loop defines them (f32 sums, then / cols), summed 16 lanes
// at a time.
AMPD_AVX512 void LayerNormRowAvx512(const float* x, const float* g, const float* b, int64_t cols,
                                    float eps, float* y, float* mean, float* rstd) {
  const int64_t n = cols / 16;
  float mu = SumVectors(n, [&](int64_t i) AMPD_AVX512 { return _mm512_loadu_ps(x + 16 * i); });
  mu /= cols;
  const __m512 vmu = _mm512_set1_ps(mu);
  float var = SumVectors(n, [&](int64_t i) AMPD_AVX512 {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + 16 * i), vmu);
    return _mm512_mul_ps(d, d);
  });
  var /= cols;
  const float rs = 1.0f / std::sqrt(var + eps);
  *mean = mu;
  *rstd = rs;
  const __m512 vrs = _mm512_set1_ps(rs);
  for (int64_t i = 0; i < n; ++i) {
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * i), vmu), vrs);
    _mm512_storeu_ps(y + 16 * i, _mm512_add_ps(_mm512_mul_ps(xhat, _mm512_loadu_ps(g + 16 * i)),
                                               _mm512_loadu_ps(b + 16 * i)));
  }
}

// One row of LayerNorm's dx, cols a multiple of 16, as the portable loop
// computes it. inv_cols is 1 / cols when that is exact (cols a power of
// two), so multiplying by it rounds as dividing does; else 0: divide.
AMPD_AVX512 void LayerNormBackwardRowAvx512(const float* x, const float* g, const float* dy,
                                            int64_t cols, float m, float rs, float inv_cols,
                                            float* dx) {
  const int64_t n = cols / 16;
  const __m512 vm = _mm512_set1_ps(m), vrs = _mm512_set1_ps(rs);
  auto gc = [&](int64_t i) AMPD_AVX512 {
    return _mm512_mul_ps(_mm512_loadu_ps(dy + 16 * i), _mm512_loadu_ps(g + 16 * i));
  };
  auto xhat = [&](int64_t i) AMPD_AVX512 {
    return _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * i), vm), vrs);
  };
  const __m512 sum_g = _mm512_set1_ps(SumVectors(n, gc));
  const __m512 sum_gx = _mm512_set1_ps(
      SumVectors(n, [&](int64_t i) AMPD_AVX512 { return _mm512_mul_ps(gc(i), xhat(i)); }));
  const __m512 vinv = _mm512_set1_ps(inv_cols), vcols = _mm512_set1_ps(static_cast<float>(cols));
  for (int64_t i = 0; i < n; ++i) {
    const __m512 t = _mm512_add_ps(sum_g, _mm512_mul_ps(xhat(i), sum_gx));
    const __m512 q = inv_cols != 0 ? _mm512_mul_ps(t, vinv) : _mm512_div_ps(t, vcols);
    _mm512_storeu_ps(dx + 16 * i, _mm512_mul_ps(vrs, _mm512_sub_ps(gc(i), q)));
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
  Output<C> mean({rows}, stat), rstd({rows}, stat);
  const C* __restrict g = gv.data();
  const C* __restrict b = bv.data();
  // Rows are independent: each is computed whole by one thread.
#ifdef AMPD_HAS_AVX512_KERNELS
  if constexpr (std::is_same_v<C, float>) {
    if (cols % 16 == 0 && UseAvx512Kernels()) {
      // A low-precision y (a norm feeding a bf16 linear: ops/layer_norm.h)
      // is rounded a row at a time, while the row is in L1.
      Tensor y = Tensor::Uninitialized(x.shape(), out);
      ForRowChunks(rows, cols, [&](int64_t r) {
        float* yr = DestBlock(y, r * cols, RowScratch(cols));
        LayerNormRowAvx512(xv.data() + r * cols, g, b, cols, static_cast<float>(eps), yr, &mean[r],
                           &rstd[r]);
        StoreBlock(yr, y, r * cols, cols);
      });
      return {y, mean.Finish(), rstd.Finish()};
    }
  }
#endif
  Output<C> y(x.shape(), out);
  C* __restrict yp = y.data();
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
  Values<C> xv(x), gv(gamma), mv(fwd.mean), rv(fwd.rstd);
  Output<C> dx(x.shape(), x.dtype());
  const C* __restrict xp = xv.data();
  const C* __restrict g = gv.data();
  C* __restrict dxp = dx.data();
  // A division per element keeps the divider busy (16 cycles a vector on
  // Intel's cores). When cols is a power of two, 1 / cols is exact and
  // multiplying by it rounds exactly as dividing does: same bits, no divide.
  const C inv_cols = (cols & (cols - 1)) == 0 ? C(1) / static_cast<C>(cols) : C(0);
  // dgamma, dbeta: each column summed over the rows in order, in double, by
  // the one thread that owns its slice of columns (so the sums do not depend
  // on the thread count).
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  auto finish = [&] {
    return LayerNormGrads{dx.Finish(), Tensor::FromDoubles(dg, {cols}, gamma.dtype()),
                          Tensor::FromDoubles(db, {cols}, gamma.dtype())};
  };
#ifdef AMPD_HAS_AVX512_KERNELS
  if constexpr (std::is_same_v<C, float>) {
    if (cols % 16 == 0 && UseAvx512Kernels()) {
      // dy is read as it is when f32 or bf16 (the gradient of a norm that fed
      // a bf16 linear: widened as it loads); another dtype is widened whole.
      const bool bf16_dy = dy.dtype() == DType::kBF16;
      std::optional<Values<float>> widened;
      if (!bf16_dy && dy.dtype() != DType::kF32) widened.emplace(dy);
      const void* dy_base = widened ? widened->data() : dy.raw();
      // dx: rows are independent, each computed whole by one thread.
      ForRowChunks(rows, cols, [&](int64_t r) {
        const float* dyr =
            widened ? widened->data() + r * cols : LoadBlock(dy, r * cols, cols, RowScratch(cols));
        LayerNormBackwardRowAvx512(xp + r * cols, g, dyr, cols, mv[r], rv[r], inv_cols,
                                   dxp + r * cols);
      });
      ForColumnRanges(rows, cols, [&](int64_t c0, int64_t c1) {
        (bf16_dy ? GammaBetaGradsAvx512<true>
                 : GammaBetaGradsAvx512<false>)(xp, dy_base, mv.data(), rv.data(), rows, cols, c0,
                                                c1, dg.data(), db.data());
      });
      return finish();
    }
  }
#endif
  Values<C> dv(dy);
  const C* __restrict dyp = dv.data();
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
    if (inv_cols != 0) {
      AMPD_SIMD
      for (int64_t c = 0; c < cols; ++c) {
        const C xhat = (xp[o + c] - m) * rs;
        dxp[o + c] = rs * (dyp[o + c] * g[c] - (sum_g + xhat * sum_gx) * inv_cols);
      }
    } else {
      AMPD_SIMD
      for (int64_t c = 0; c < cols; ++c) {
        const C xhat = (xp[o + c] - m) * rs;
        dxp[o + c] = rs * (dyp[o + c] * g[c] - (sum_g + xhat * sum_gx) / cols);
      }
    }
  });
  ForColumnRanges(rows, cols, [&](int64_t c0, int64_t c1) {
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
  return finish();
}

AMPD_REGISTER_KERNEL(LayerNormKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::LayerNorm>::Call);
AMPD_REGISTER_KERNEL(LayerNormBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::LayerNormBackward>::Call);

}  // namespace ampd::engine::cpu
