// The CPU backend: batch norm forward and backward, one channel per task.
// Per-channel sums are taken in double in a fixed order (element j of a row
// joins sum j % 8), so the statistics do not depend on the thread count.
// f32, bf16 and f16 activations go a row at a time (BatchNormRows: a bf16
// row is widened into a buffer, never the whole tensor), on AVX-512 8
// doubles or 16 floats wide with the portable rows' sums, order and
// roundings (no fused multiply-adds), so bitwise the same; f64 (gradient
// checks) takes the element loops of BatchNormImpl<double>.

#include "engine/backend/kernels/batch_norm.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/cpu/avx512_math.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

using backend::BatchNormBackwardKernel;
using backend::BatchNormGrads;
using backend::BatchNormKernel;
using backend::BatchNormResult;
using backend::KernelMethod;

namespace {

// x's layout as [N, C, inner]: inner is H*W (1 for [N, C]).
struct Channels {
  int64_t n, c, inner;
  explicit Channels(const Tensor& x)
      : n(x.dim(0)), c(x.dim(1)), inner(x.numel() / std::max<int64_t>(1, x.dim(0) * x.dim(1))) {}
  int64_t count() const { return n * inner; }
  // fn(index) over channel ch's elements, in a fixed order.
  template <typename F>
  void ForEach(int64_t ch, const F& fn) const {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t base = (i * c + ch) * inner;
      for (int64_t j = 0; j < inner; ++j) fn(base + j);
    }
  }
};

// The sums of first(i) and second(i) over channel ch's elements, in double,
// in a fixed order that does not depend on the thread count: eight running
// sums by position within each image's plane (element j joins sum j % 8),
// added pairwise at the end. One chain of dependent adds would take the
// adder's full latency per element; eight independent ones vectorise.
template <typename F, typename G>
std::pair<double, double> ChannelSums(const Channels& s, int64_t ch, const F& first,
                                      const G& second) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t base = (i * s.c + ch) * s.inner;
    int64_t j = 0;
    for (; j + 8 <= s.inner; j += 8) {
      for (int l = 0; l < 8; ++l) {
        a[l] += first(base + j + l);
        b[l] += second(base + j + l);
      }
    }
    for (; j < s.inner; ++j) {
      a[j % 8] += first(base + j);
      b[j % 8] += second(base + j);
    }
  }
  auto total = [](const double* v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  };
  return {total(a), total(b)};
}

// ChannelSums of one function.
template <typename F>
double ChannelSum(const Channels& s, int64_t ch, const F& f) {
  return ChannelSums(s, ch, f, [](int64_t) { return 0.0; }).first;
}

// Moves a running statistic toward `value` in its own dtype (f32 or f64).
void Blend(const Tensor& running, int64_t ch, double momentum, double value) {
  if (running.dtype() == DType::kF64) {
    double& r = running.data<double>()[ch];
    r = (1 - momentum) * r + momentum * value;
  } else {
    float& r = running.data<float>()[ch];
    r = static_cast<float>((1 - momentum) * r + momentum * value);
  }
}
// The batch's (biased) variance from its sum of squared deviations, after
// moving the running statistics toward the batch mean and the unbiased
// variance (PyTorch's).
double BatchVariance(const Channels& s, int64_t ch, double mu, double sq,
                     const Tensor& running_mean, const Tensor& running_var, double momentum) {
  const double var = sq / static_cast<double>(s.count());
  const double unbiased = s.count() > 1 ? sq / static_cast<double>(s.count() - 1) : var;
  Blend(running_mean, ch, momentum, mu);
  Blend(running_var, ch, momentum, unbiased);
  return var;
}

// Rows of channel ch: (i * c + ch) * inner for image i. A row of a bf16 or
// f16 tensor is widened into `buf` (exactly, as a whole-tensor copy would),
// so those inputs cost their own size in memory traffic, not a copy's.
inline const float* Row(const Tensor& t, const Channels& s, int64_t i, int64_t ch, float* buf) {
  return LoadBlock(t, (i * s.c + ch) * s.inner, s.inner, buf);
}

double PairwiseTotal(const double* v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// The portable rows, as ChannelSums and the per-element loops of the
// generic path compute them (element j of a row joins sum j % 8).
void ChannelMomentsPortable(const Channels& s, const Tensor& x, int64_t ch, float* buf, double* sum,
                            double* sq) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < s.n; ++i) {
    const float* r = Row(x, s, i, ch, buf);
    for (int64_t j = 0; j < s.inner; ++j) a[j % 8] += static_cast<double>(r[j]);
  }
  *sum = PairwiseTotal(a);
  const double mu = *sum / static_cast<double>(s.count());
  double b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < s.n; ++i) {
    const float* r = Row(x, s, i, ch, buf);
    for (int64_t j = 0; j < s.inner; ++j) {
      const double d = r[j] - mu;
      b[j % 8] += d * d;
    }
  }
  *sq = PairwiseTotal(b);
}

void NormalizeChannelPortable(const Channels& s, const Tensor& x, int64_t ch, float m, float scale,
                              float shift, const Tensor& y, float* buf, float* out) {
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t base = (i * s.c + ch) * s.inner;
    const float* r = Row(x, s, i, ch, buf);
    float* dst = DestBlock(y, base, out);
    for (int64_t j = 0; j < s.inner; ++j) dst[j] = (r[j] - m) * scale + shift;
    StoreBlock(dst, y, base, s.inner);
  }
}

void GradSumsChannelPortable(const Channels& s, const Tensor& x, const Tensor& dy, int64_t ch,
                             float m, float r, float* xbuf, float* dbuf, double* sum_dy,
                             double* sum_dy_xhat) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < s.n; ++i) {
    const float* xr = Row(x, s, i, ch, xbuf);
    const float* dr = Row(dy, s, i, ch, dbuf);
    for (int64_t j = 0; j < s.inner; ++j) {
      a[j % 8] += static_cast<double>(dr[j]);
      b[j % 8] += static_cast<double>(dr[j]) * ((xr[j] - m) * r);
    }
  }
  *sum_dy = PairwiseTotal(a);
  *sum_dy_xhat = PairwiseTotal(b);
}

void GradInputChannelPortable(const Channels& s, const Tensor& x, const Tensor& dy, int64_t ch,
                              float m, float r, float scale, float a, float b, const Tensor& dx,
                              float* xbuf, float* dbuf, float* out) {
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t base = (i * s.c + ch) * s.inner;
    const float* xr = Row(x, s, i, ch, xbuf);
    const float* dr = Row(dy, s, i, ch, dbuf);
    float* dst = DestBlock(dx, base, out);
    for (int64_t j = 0; j < s.inner; ++j) dst[j] = scale * (dr[j] - a - (xr[j] - m) * r * b);
    StoreBlock(dst, dx, base, s.inner);
  }
}

#ifdef AMPD_HAS_AVX512_KERNELS
// The eight running sums of ChannelSums are the eight double lanes of one
// register: element j of a row joins lane j % 8, as there.
#define AMPD_BN_AVX512 __attribute__((target("avx512f,avx512vl"), optimize("fp-contract=off")))

AMPD_BN_AVX512 inline __m512d Load8(const float* p, int64_t n) {
  const __mmask8 m = n >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << n) - 1u);
  return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, p));
}

// sum += x (as doubles); sq += (x - mu)^2 when `sq` (the second pass).
AMPD_BN_AVX512 void SumRow(const float* x, int64_t len, __m512d* sum) {
  for (int64_t j = 0; j < len; j += 8) *sum = _mm512_add_pd(*sum, Load8(x + j, len - j));
}
AMPD_BN_AVX512 void SquaredDeviationRow(const float* x, int64_t len, double mu, __m512d* sq) {
  const __m512d m = _mm512_set1_pd(mu);
  for (int64_t j = 0; j < len; j += 8) {
    const int64_t n = std::min<int64_t>(8, len - j);
    const __mmask8 k = n >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << n) - 1u);
    // Lanes past the row add nothing (the portable loop never reaches them).
    const __m512d d = _mm512_maskz_sub_pd(k, Load8(x + j, n), m);
    *sq = _mm512_add_pd(*sq, _mm512_mul_pd(d, d));
  }
}

// y = (x - m) * scale + shift over one row, in float.
AMPD_BN_AVX512 void NormalizeRow(const float* x, int64_t len, float m, float scale, float shift,
                                 float* y) {
  const __m512 vm = _mm512_set1_ps(m), vs = _mm512_set1_ps(scale), vb = _mm512_set1_ps(shift);
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    _mm512_storeu_ps(y + j, _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v, vm), vs), vb));
  }
  if (j < len) {
    const __mmask16 k = FirstLanes(len - j);
    const __m512 v = _mm512_maskz_loadu_ps(k, x + j);
    _mm512_mask_storeu_ps(y + j, k, _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v, vm), vs), vb));
  }
}

// The backward's sums: dy, and dy * ((x - m) * r) with the product in float
// first, as the portable loop has it.
AMPD_BN_AVX512 void GradSumsRow(const float* x, const float* dy, int64_t len, float m, float r,
                                __m512d* sum_dy, __m512d* sum_dy_xhat) {
  const __m256 vm = _mm256_set1_ps(m), vr = _mm256_set1_ps(r);
  for (int64_t j = 0; j < len; j += 8) {
    const int64_t n = std::min<int64_t>(8, len - j);
    const __mmask8 k = n >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << n) - 1u);
    const __m256 xv = _mm256_maskz_loadu_ps(k, x + j);
    const __m256 dv = _mm256_maskz_loadu_ps(k, dy + j);
    const __m512d d = _mm512_cvtps_pd(dv);
    const __m512d xhat = _mm512_cvtps_pd(_mm256_mul_ps(_mm256_sub_ps(xv, vm), vr));
    *sum_dy = _mm512_add_pd(*sum_dy, d);
    // Lanes past the row: dy is 0 there, and 0 * finite adds +0.
    *sum_dy_xhat = _mm512_add_pd(*sum_dy_xhat, _mm512_maskz_mul_pd(k, d, xhat));
  }
}

// dx = scale * (dy - a - (x - m) * r * b) (training) over one row.
AMPD_BN_AVX512 void GradInputRow(const float* x, const float* dy, int64_t len, float m, float r,
                                 float scale, float a, float b, float* dx) {
  const __m512 vm = _mm512_set1_ps(m), vr = _mm512_set1_ps(r), vs = _mm512_set1_ps(scale),
               va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 k = FirstLanes(len - j);
    const bool whole = len - j >= 16;
    const __m512 xv = whole ? _mm512_loadu_ps(x + j) : _mm512_maskz_loadu_ps(k, x + j);
    const __m512 dv = whole ? _mm512_loadu_ps(dy + j) : _mm512_maskz_loadu_ps(k, dy + j);
    const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(xv, vm), vr), vb);
    const __m512 out = _mm512_mul_ps(vs, _mm512_sub_ps(_mm512_sub_ps(dv, va), t));
    if (whole) {
      _mm512_storeu_ps(dx + j, out);
    } else {
      _mm512_mask_storeu_ps(dx + j, k, out);
    }
  }
}

// The pairwise total of ChannelSums' eight sums.
AMPD_BN_AVX512 double Total(__m512d v) {
  alignas(64) double l[8];
  _mm512_store_pd(l, v);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// Channel ch's sum, then its sum of squared deviations from sum / count.
AMPD_BN_AVX512 void ChannelMomentsAvx512(const Channels& s, const Tensor& x, int64_t ch, float* buf,
                                         double* sum, double* sq) {
  __m512d acc = _mm512_setzero_pd();
  for (int64_t i = 0; i < s.n; ++i) SumRow(Row(x, s, i, ch, buf), s.inner, &acc);
  *sum = Total(acc);
  const double mu = *sum / static_cast<double>(s.count());
  acc = _mm512_setzero_pd();
  for (int64_t i = 0; i < s.n; ++i) SquaredDeviationRow(Row(x, s, i, ch, buf), s.inner, mu, &acc);
  *sq = Total(acc);
}

AMPD_BN_AVX512 void NormalizeChannelAvx512(const Channels& s, const Tensor& x, int64_t ch, float m,
                                           float scale, float shift, const Tensor& y, float* buf,
                                           float* out) {
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t base = (i * s.c + ch) * s.inner;
    float* dst = DestBlock(y, base, out);
    NormalizeRow(Row(x, s, i, ch, buf), s.inner, m, scale, shift, dst);
    StoreBlock(dst, y, base, s.inner);
  }
}

AMPD_BN_AVX512 void GradSumsChannelAvx512(const Channels& s, const Tensor& x, const Tensor& dy,
                                          int64_t ch, float m, float r, float* xbuf, float* dbuf,
                                          double* sum_dy, double* sum_dy_xhat) {
  __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
  for (int64_t i = 0; i < s.n; ++i) {
    GradSumsRow(Row(x, s, i, ch, xbuf), Row(dy, s, i, ch, dbuf), s.inner, m, r, &a, &b);
  }
  *sum_dy = Total(a);
  *sum_dy_xhat = Total(b);
}

AMPD_BN_AVX512 void GradInputChannelAvx512(const Channels& s, const Tensor& x, const Tensor& dy,
                                           int64_t ch, float m, float r, float scale, float a,
                                           float b, const Tensor& dx, float* xbuf, float* dbuf,
                                           float* out) {
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t base = (i * s.c + ch) * s.inner;
    float* dst = DestBlock(dx, base, out);
    GradInputRow(Row(x, s, i, ch, xbuf), Row(dy, s, i, ch, dbuf), s.inner, m, r, scale, a, b, dst);
    StoreBlock(dst, dx, base, s.inner);
  }
}

#endif

// Batch norm's forward and backward in f32, a row at a time: the generic
// BatchNormImpl's steps, on the AVX-512 rows when `wide`, else the portable
// ones (the same bits). A bf16 or f16 activation is widened a row at a time,
// never copied whole.
BatchNormResult BatchNormRows(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                              const Tensor& running_mean, const Tensor& running_var, bool training,
                              double momentum, double eps, DType out, bool wide) {
  const Channels s(x);
  const std::vector<float> gv = gamma.ToFloats(), bv = beta.ToFloats();
  const std::vector<double> rm = running_mean.ToDoubles(), rv = running_var.ToDoubles();
  Tensor y = Tensor::Uninitialized(x.shape(), out);
  std::vector<float> mean(s.c), rstd(s.c);
  ParallelFor(s.c, x.numel() >= kParallelMin, [&](int64_t ch) {
    std::vector<float> buf(s.inner), tmp(s.inner);
    double mu = 0, var = 0;
    if (training) {
      double sum = 0, sq = 0;
#ifdef AMPD_HAS_AVX512_KERNELS
      if (wide) ChannelMomentsAvx512(s, x, ch, buf.data(), &sum, &sq);
#endif
      if (!wide) ChannelMomentsPortable(s, x, ch, buf.data(), &sum, &sq);
      mu = sum / static_cast<double>(s.count());
      var = BatchVariance(s, ch, mu, sq, running_mean, running_var, momentum);
    } else {
      mu = rm[ch];
      var = rv[ch];
    }
    const float m = static_cast<float>(mu), r = static_cast<float>(1.0 / std::sqrt(var + eps));
    mean[ch] = m;
    rstd[ch] = r;
#ifdef AMPD_HAS_AVX512_KERNELS
    if (wide) {
      NormalizeChannelAvx512(s, x, ch, m, r * gv[ch], bv[ch], y, buf.data(), tmp.data());
      return;
    }
#endif
    NormalizeChannelPortable(s, x, ch, m, r * gv[ch], bv[ch], y, buf.data(), tmp.data());
  });
  return {y, Tensor::FromVector(mean, {s.c}, DType::kF32),
          Tensor::FromVector(rstd, {s.c}, DType::kF32)};
}

BatchNormGrads BatchNormBackwardRows(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, bool training,
                                     bool wide) {
  const Channels s(x);
  const std::vector<float> gv = gamma.ToFloats(), mv = mean.ToFloats(), rv = rstd.ToFloats();
  Tensor dx = Tensor::Uninitialized(x.shape(), x.dtype());
  std::vector<double> dg(s.c), db(s.c);
  ParallelFor(s.c, x.numel() >= kParallelMin, [&](int64_t ch) {
    std::vector<float> xbuf(s.inner), dbuf(s.inner), out(s.inner);
    const float m = mv[ch], r = rv[ch];
    double sum_dy = 0, sum_dy_xhat = 0;
#ifdef AMPD_HAS_AVX512_KERNELS
    if (wide) {
      GradSumsChannelAvx512(s, x, dy, ch, m, r, xbuf.data(), dbuf.data(), &sum_dy, &sum_dy_xhat);
    }
#endif
    if (!wide) {
      GradSumsChannelPortable(s, x, dy, ch, m, r, xbuf.data(), dbuf.data(), &sum_dy, &sum_dy_xhat);
    }
    dg[ch] = sum_dy_xhat;
    db[ch] = sum_dy;
    const float scale = r * gv[ch];
    float a = 0, b = 0;
    if (training) {
      const float inv = static_cast<float>(1.0 / static_cast<double>(s.count()));
      a = static_cast<float>(sum_dy) * inv;
      b = static_cast<float>(sum_dy_xhat) * inv;
    }
    if (!training) {
      // dx = dy * scale (the statistics are constants in eval).
      for (int64_t i = 0; i < s.n; ++i) {
        const int64_t base = (i * s.c + ch) * s.inner;
        float* dst = DestBlock(dx, base, out.data());
        const float* d = Row(dy, s, i, ch, dbuf.data());
        for (int64_t j = 0; j < s.inner; ++j) dst[j] = d[j] * scale;
        StoreBlock(dst, dx, base, s.inner);
      }
      return;
    }
#ifdef AMPD_HAS_AVX512_KERNELS
    if (wide) {
      GradInputChannelAvx512(s, x, dy, ch, m, r, scale, a, b, dx, xbuf.data(), dbuf.data(),
                             out.data());
      return;
    }
#endif
    GradInputChannelPortable(s, x, dy, ch, m, r, scale, a, b, dx, xbuf.data(), dbuf.data(),
                             out.data());
  });
  return {dx, Tensor::FromDoubles(dg, {s.c}, gamma.dtype()),
          Tensor::FromDoubles(db, {s.c}, gamma.dtype())};
}
}  // namespace

BatchNormResult CpuBackendImpl::BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& running_mean, const Tensor& running_var,
                                          bool training, double momentum, double eps, DType out) {
  return UsesDouble(x) ? BatchNormImpl<double>(x, gamma, beta, running_mean, running_var, training,
                                               momentum, eps, out)
                       : BatchNormRows(x, gamma, beta, running_mean, running_var, training,
                                       momentum, eps, out, UseAvx512Rows());
}

template <typename C>
BatchNormResult CpuBackendImpl::BatchNormImpl(const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, const Tensor& running_mean,
                                              const Tensor& running_var, bool training,
                                              double momentum, double eps, DType out) {
  const Channels s(x);
  const DType stat = std::is_same_v<C, double> ? DType::kF64 : DType::kF32;
  Values<C> xv(x), gv(gamma), bv(beta);
  Output<C> y(x.shape(), out), mean({s.c}, stat), rstd({s.c}, stat);
  const std::vector<double> rm = running_mean.ToDoubles(), rv = running_var.ToDoubles();
  ParallelFor(s.c, x.numel() >= kParallelMin, [&](int64_t ch) {
    double mu, var;
    if (training) {
      const double sum = ChannelSum(s, ch, [&](int64_t i) { return static_cast<double>(xv[i]); });
      mu = sum / static_cast<double>(s.count());
      const double sq = ChannelSum(s, ch, [&](int64_t i) {
        const double d = xv[i] - mu;
        return d * d;
      });
      var = BatchVariance(s, ch, mu, sq, running_mean, running_var, momentum);
    } else {
      mu = rm[ch];
      var = rv[ch];
    }
    const C m = static_cast<C>(mu), r = static_cast<C>(1.0 / std::sqrt(var + eps));
    mean[ch] = m;
    rstd[ch] = r;
    const C scale = r * gv[ch], shift = bv[ch];
    s.ForEach(ch, [&](int64_t i) { y[i] = (xv[i] - m) * scale + shift; });
  });
  return {y.Finish(), mean.Finish(), rstd.Finish()};
}

BatchNormGrads CpuBackendImpl::BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Tensor& dy, bool training) {
  return UsesDouble(x) ? BatchNormBackwardImpl<double>(x, gamma, mean, rstd, dy, training)
                       : BatchNormBackwardRows(x, gamma, mean, rstd, dy, training, UseAvx512Rows());
}

template <typename C>
BatchNormGrads CpuBackendImpl::BatchNormBackwardImpl(const Tensor& x, const Tensor& gamma,
                                                     const Tensor& mean, const Tensor& rstd,
                                                     const Tensor& dy, bool training) {
  const Channels s(x);
  Values<C> xv(x), gv(gamma), mv(mean), rv(rstd), dv(dy);
  Output<C> dx(x.shape(), x.dtype());
  std::vector<double> dg(s.c), db(s.c);
  ParallelFor(s.c, x.numel() >= kParallelMin, [&](int64_t ch) {
    const C m = mv[ch], r = rv[ch];
    const auto [sum_dy, sum_dy_xhat] = ChannelSums(
        s, ch, [&](int64_t i) { return static_cast<double>(dv[i]); },
        [&](int64_t i) { return static_cast<double>(dv[i]) * ((xv[i] - m) * r); });
    dg[ch] = sum_dy_xhat;
    db[ch] = sum_dy;
    const C scale = r * gv[ch];
    if (!training) {
      s.ForEach(ch, [&](int64_t i) { dx[i] = dv[i] * scale; });
      return;
    }
    // dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)).
    const C inv = static_cast<C>(1.0 / static_cast<double>(s.count()));
    const C a = static_cast<C>(sum_dy) * inv, b = static_cast<C>(sum_dy_xhat) * inv;
    s.ForEach(ch, [&](int64_t i) { dx[i] = scale * (dv[i] - a - (xv[i] - m) * r * b); });
  });
  return {dx.Finish(), Tensor::FromDoubles(dg, {s.c}, gamma.dtype()),
          Tensor::FromDoubles(db, {s.c}, gamma.dtype())};
}

AMPD_REGISTER_KERNEL(BatchNormKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::BatchNorm>::Call);
AMPD_REGISTER_KERNEL(BatchNormBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::BatchNormBackward>::Call);

}  // namespace ampd::engine::cpu
