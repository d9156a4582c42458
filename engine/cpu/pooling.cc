// The CPU backend: 2-D pooling forward and backward, one (n, c) plane per
// task (planes are independent, so the split does not change the results).

#include "engine/backend/kernels/pooling.h"

#include "engine/cpu/avx512_math.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

using backend::KernelMethod;
using backend::Pool2dBackwardKernel;
using backend::Pool2dKernel;
using ops::Pool2dGeometry;
using ops::PoolWindow;
using ops::PoolWindowAt;

namespace {

// Calls fn(index into the plane) for each tap of output (oh, ow)'s window.
template <typename F>
void ForTaps(const PoolWindow& wh, const PoolWindow& ww, int64_t W, const F& fn) {
  for (int64_t i = 0; i < wh.count; ++i) {
    const int64_t h = wh.first + i * wh.step;
    for (int64_t j = 0; j < ww.count; ++j) fn(h * W + ww.first + j * ww.step);
  }
}

// The forward's choice for a max window: the first maximum, NaN beating
// every number (PyTorch's rule); -1 for an empty window.
template <typename C>
int64_t ArgMax(const C* plane, const PoolWindow& wh, const PoolWindow& ww, int64_t W) {
  int64_t best = -1;
  C best_v = 0;
  ForTaps(wh, ww, W, [&](int64_t i) {
    const C v = plane[i];
    if (best < 0 || v > best_v || (std::isnan(v) && !std::isnan(best_v))) best = i, best_v = v;
  });
  return best;
}

// Windows that never leave the input (no padding, dilation 1, max or avg):
// the taps of output (oh, ow) are rows oh*s0 .. +k0 and columns ow*s1 .. +k1,
// visited in the same order as ForTaps, so results are the same bits.
bool Unpadded(const Pool2dGeometry& g) {
  return g.op != OpId::kAdaptiveAvgPool2d && g.padding[0] == 0 && g.padding[1] == 0 &&
         (g.op == OpId::kAvgPool2d || (g.dilation[0] == 1 && g.dilation[1] == 1));
}

template <typename C>
int64_t UnpaddedArgMax(const C* plane, int64_t top, int64_t left, int64_t k0, int64_t k1,
                       int64_t W) {
  int64_t best = top * W + left;
  C best_v = plane[best];
  for (int64_t i = 0; i < k0; ++i) {
    const C* row = plane + (top + i) * W + left;
    for (int64_t j = 0; j < k1; ++j) {
      const C v = row[j];
      if (v > best_v || (std::isnan(v) && !std::isnan(best_v))) {
        best = (top + i) * W + left + j;
        best_v = v;
      }
    }
  }
  return best;
}

// Which of a 2x2 window's values (a b / c d) is its first maximum, in the
// order UnpaddedArgMax scans them (NaN wins), without branches: the common
// max pool of convnets, where the general scan's data-dependent branches
// cost more than the comparisons.
template <typename C>
inline int First2x2Max(C a, C b, C c, C d, C* best) {
  C m = a;
  int k = 0;
  auto take = [&](C v, int i) {
    const bool t = v > m || (v != v && m == m);
    m = t ? v : m;
    k = t ? i : k;
  };
  take(b, 1);
  take(c, 2);
  take(d, 3);
  *best = m;
  return k;
}

bool Is2x2Stride2Max(const Pool2dGeometry& g) {
  return g.op == OpId::kMaxPool2d && Unpadded(g) && g.kernel[0] == 2 && g.kernel[1] == 2 &&
         g.stride[0] == 2 && g.stride[1] == 2;
}

#ifdef AMPD_HAS_AVX512_KERNELS
// First2x2Max for 16 windows at once: the lanes of a, b, c, d are the
// windows' four values in First2x2Max's order; k gets the winner's index.
AMPD_AVX512 inline __m512 First2x2Max16(__m512 a, __m512 b, __m512 c, __m512 d, __m512i* k) {
  __m512 m = a;
  __m512i idx = _mm512_setzero_si512();
  const __m512 v[3] = {b, c, d};
  for (int i = 0; i < 3; ++i) {
    // v > m, or v NaN and m not (First2x2Max's rule).
    const __mmask16 take =
        _mm512_cmp_ps_mask(v[i], m, _CMP_GT_OQ) |
        (_mm512_cmp_ps_mask(v[i], v[i], _CMP_UNORD_Q) & _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q));
    m = _mm512_mask_mov_ps(m, take, v[i]);
    idx = _mm512_mask_mov_epi32(idx, take, _mm512_set1_epi32(i + 1));
  }
  *k = idx;
  return m;
}

// Even and odd lanes of the first 2n (n <= 16) floats at p: the left and
// right values of n windows' row (lanes past n are 0).
AMPD_AVX512 inline void Deinterleave(const float* p, int64_t n, __m512* even, __m512* odd) {
  const __m512 lo = _mm512_maskz_loadu_ps(FirstLanes(2 * n), p);
  const __m512 hi = _mm512_maskz_loadu_ps(FirstLanes(std::max<int64_t>(0, 2 * n - 16)), p + 16);
  const __m512i e = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  *even = _mm512_permutex2var_ps(lo, e, hi);
  *odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(e, _mm512_set1_epi32(1)), hi);
}

// The maxima (and in k the winners) of n <= 16 windows from ow on, over
// input rows r0 and r1.
AMPD_AVX512 inline __m512 WindowsMax16(const float* r0, const float* r1, int64_t ow, int64_t n,
                                       __m512i* k) {
  __m512 a, b, c, d;
  Deinterleave(r0 + 2 * ow, n, &a, &b);
  Deinterleave(r1 + 2 * ow, n, &c, &d);
  return First2x2Max16(a, b, c, d, k);
}

// Stores the first n lanes of v at p. Masked stores are slow on some cores
// (Zen), so when a kernel stores in increasing address order through a
// plane it alone writes, and will write all of it (the windows, then the
// odd row or column it zeroes), `limit` is that plane's end: where the 16
// lanes fit below it they are all stored, the lanes past n landing where a
// later store puts the right values. Null: masked.
AMPD_AVX512 inline void StoreFirst(float* p, int64_t n, __m512 v, const float* limit) {
  if (n == 16 || (limit != nullptr && p + 16 <= limit)) {
    _mm512_storeu_ps(p, v);
  } else if (n > 0) {
    _mm512_mask_storeu_ps(p, FirstLanes(n), v);
  }
}

// The 2x2 stride-2 max pool of one output row from input rows r0, r1, 16
// windows at a time (the planes of small CNNs are narrow: 14 or 7 windows
// a row). `limit`: StoreFirst's.
AMPD_AVX512 void MaxPool2x2RowAvx512(const float* r0, const float* r1, int64_t OW, float* out,
                                     const float* limit) {
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    __m512i k;
    StoreFirst(out + ow, n, WindowsMax16(r0, r1, ow, n, &k), limit);
  }
}

// Its backward: each window's four values get d where the forward took the
// maximum and 0 elsewhere.
AMPD_AVX512 void MaxPool2x2BackwardRowAvx512(const float* r0, const float* r1, const float* drow,
                                             int64_t OW, float* d0, float* d1, const float* limit) {
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx = _mm512_add_epi32(lo_idx, _mm512_set1_epi32(8));
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    __m512i k;
    WindowsMax16(r0, r1, ow, n, &k);
    const __m512 g = _mm512_maskz_loadu_ps(FirstLanes(n), drow + ow);
    __m512 gk[4];
    for (int i = 0; i < 4; ++i) {
      gk[i] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(i)), g);
    }
    // With one group of windows a row (OW <= 16) the four stores go up in
    // address order; with more, group 2's row d0 would land on row d1's
    // start, already written: masked then.
    if (OW > 16) limit = nullptr;
    const int64_t lo = std::min<int64_t>(16, 2 * n), hi = std::max<int64_t>(0, 2 * n - 16);
    StoreFirst(d0 + 2 * ow, lo, _mm512_permutex2var_ps(gk[0], lo_idx, gk[1]), limit);
    StoreFirst(d0 + 2 * ow + 16, hi, _mm512_permutex2var_ps(gk[0], hi_idx, gk[1]), limit);
    StoreFirst(d1 + 2 * ow, lo, _mm512_permutex2var_ps(gk[2], lo_idx, gk[3]), limit);
    StoreFirst(d1 + 2 * ow + 16, hi, _mm512_permutex2var_ps(gk[2], hi_idx, gk[3]), limit);
  }
}

// The bf16 rows' 16-bit loads and stores (AVX-512 BW and VL, which
// Bf16RowsHere checks).
#define AMPD_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl")))
bool Bf16RowsHere() {
  static const bool ok = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return ok;
}

// bf16 rows read and written as they are, with no f32 plane in between. A
// dword of a row holds one window's left (low half) and right (high half)
// bf16 values, so as floats left = dword << 16 and right = dword with its
// low half cleared (bf16 -> f32 is exact).
AMPD_AVX512 inline void Bf16Pairs16(const uint16_t* p, int64_t n, __m512* left, __m512* right) {
  const __m512i v = _mm512_maskz_loadu_epi32(FirstLanes(n), p);
  *left = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  *right =
      _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// The bf16 bits of 16 floats that are bf16 values already (a maximum or a
// gradient of bf16 inputs), in the dwords' low halves: their top halves,
// with a NaN's quiet bit set, as core::F32ToBF16Bits rounds them (the
// widened path's bits).
AMPD_AVX512 inline __m512i Bf16Bits16(__m512 v) {
  const __m512i top = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
  return _mm512_mask_or_epi32(top, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), top,
                              _mm512_set1_epi32(0x0040));
}

// MaxPool2x2RowAvx512 on bf16 rows into a bf16 output row.
AMPD_AVX512_BW void MaxPool2x2RowBf16(const uint16_t* r0, const uint16_t* r1, int64_t OW,
                                      uint16_t* out) {
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    __m512 a, b, c, d;
    Bf16Pairs16(r0 + 2 * ow, n, &a, &b);
    Bf16Pairs16(r1 + 2 * ow, n, &c, &d);
    __m512i k;
    const __m512 m = First2x2Max16(a, b, c, d, &k);
    _mm256_mask_storeu_epi16(out + ow, static_cast<__mmask16>(FirstLanes(n)),
                             _mm512_cvtepi32_epi16(Bf16Bits16(m)));
  }
}

// The dwords of one row of 16 windows' gradients: bits (bf16, low halves)
// in the low half where the winner k is `left`, in the high half where it is
// left + 1, 0 elsewhere.
AMPD_AVX512 inline __m512i WinnerPair(__m512i k, __m512i bits, int left) {
  const __m512i lo =
      _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(left)), bits);
  const __m512i hi =
      _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(left + 1)), bits);
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// MaxPool2x2BackwardRowAvx512 on bf16 rows, gradients and results: each
// window's gradient (bf16 bits) goes to the half of the dword its winner
// sits in, 0 elsewhere.
AMPD_AVX512_BW void MaxPool2x2BackwardRowBf16(const uint16_t* r0, const uint16_t* r1,
                                              const uint16_t* drow, int64_t OW, uint16_t* d0,
                                              uint16_t* d1) {
  for (int64_t ow = 0; ow < OW; ow += 16) {
    const int64_t n = std::min<int64_t>(16, OW - ow);
    const __mmask16 lanes = FirstLanes(n);
    __m512 a, b, c, d;
    Bf16Pairs16(r0 + 2 * ow, n, &a, &b);
    Bf16Pairs16(r1 + 2 * ow, n, &c, &d);
    __m512i k;
    First2x2Max16(a, b, c, d, &k);
    const __m512 g = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, drow + ow)), 16));
    const __m512i bits = Bf16Bits16(g);
    _mm512_mask_storeu_epi32(d0 + 2 * ow, lanes, WinnerPair(k, bits, 0));
    _mm512_mask_storeu_epi32(d1 + 2 * ow, lanes, WinnerPair(k, bits, 2));
  }
}

#endif

// The 2x2 stride-2 max pool a plane at a time, on the AVX-512 rows when
// `wide`, else the portable loops (the same bits). bf16 activations in and
// out (autocast's) are read and written as they are on the AVX-512 rows;
// otherwise a bf16 or f16 plane is widened into a buffer and its output
// rounded once, as whole-tensor copies would, so such activations cost
// their own size in memory traffic.
Tensor MaxPool2x2Planes(const Tensor& x, const Pool2dGeometry& g, DType out, bool wide) {
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::vector<int64_t> ys = backend::Pool2dOutputShape(x.shape(), g);
  const int64_t OH = ys[2], OW = ys[3];
  Tensor y = Tensor::Uninitialized(ys, out);
#ifdef AMPD_HAS_AVX512_KERNELS
  if (wide && x.dtype() == DType::kBF16 && out == DType::kBF16 && Bf16RowsHere()) {
    const uint16_t* xs = static_cast<const uint16_t*>(x.raw());
    uint16_t* yo = static_cast<uint16_t*>(y.raw());
    ParallelFor(planes, x.numel() >= kParallelMin, [&](int64_t p) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        const uint16_t* r0 = xs + p * H * W + 2 * oh * W;
        MaxPool2x2RowBf16(r0, r0 + W, OW, yo + (p * OH + oh) * OW);
      }
    });
    return y;
  }
#endif
  ParallelFor(planes, x.numel() >= kParallelMin, [&](int64_t p) {
    std::vector<float> in(x.dtype() == DType::kF32 ? 0 : H * W),
        res(out == DType::kF32 ? 0 : OH * OW);
    const float* plane = LoadBlock(x, p * H * W, H * W, in.data());
    float* yp = DestBlock(y, p * OH * OW, res.data());
    for (int64_t oh = 0; oh < OH; ++oh) {
      const float* r0 = plane + 2 * oh * W;
      const float* r1 = r0 + W;
      float* row = yp + oh * OW;
#ifdef AMPD_HAS_AVX512_KERNELS
      if (wide) {
        MaxPool2x2RowAvx512(r0, r1, OW, row, yp + OH * OW);
        continue;
      }
#endif
      AMPD_SIMD
      for (int64_t ow = 0; ow < OW; ++ow) {
        float m;
        First2x2Max(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1], &m);
        row[ow] = m;
      }
    }
    StoreBlock(yp, y, p * OH * OW, OH * OW);
  });
  return y;
}

// Its backward: each window's four values get d where the forward took the
// first maximum and 0 elsewhere; an odd last row or column, in no window, 0.
Tensor MaxPool2x2BackwardPlanes(const Tensor& x, const Tensor& dy, bool wide) {
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t OH = dy.dim(2), OW = dy.dim(3);
  Tensor dx = Tensor::Uninitialized(x.shape(), x.dtype());
#ifdef AMPD_HAS_AVX512_KERNELS
  if (wide && x.dtype() == DType::kBF16 && dy.dtype() == DType::kBF16 && Bf16RowsHere()) {
    const uint16_t* xs = static_cast<const uint16_t*>(x.raw());
    const uint16_t* ds = static_cast<const uint16_t*>(dy.raw());
    uint16_t* dxs = static_cast<uint16_t*>(dx.raw());
    ParallelFor(planes, x.numel() >= kParallelMin, [&](int64_t p) {
      uint16_t* dxp = dxs + p * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const uint16_t* r0 = xs + p * H * W + 2 * oh * W;
        uint16_t* d0 = dxp + 2 * oh * W;
        MaxPool2x2BackwardRowBf16(r0, r0 + W, ds + (p * OH + oh) * OW, OW, d0, d0 + W);
        if (W > 2 * OW) d0[W - 1] = d0[2 * W - 1] = 0;  // the odd column, in no window
      }
      if (H > 2 * OH) std::fill(dxp + 2 * OH * W, dxp + H * W, uint16_t{0});
    });
    return dx;
  }
#endif
  ParallelFor(planes, x.numel() >= kParallelMin, [&](int64_t p) {
    const bool f32 = x.dtype() == DType::kF32;
    std::vector<float> in(f32 ? 0 : H * W), grad(dy.dtype() == DType::kF32 ? 0 : OH * OW),
        res(f32 ? 0 : H * W);
    const float* plane = LoadBlock(x, p * H * W, H * W, in.data());
    const float* dp = LoadBlock(dy, p * OH * OW, OH * OW, grad.data());
    float* dxp = DestBlock(dx, p * H * W, res.data());
    for (int64_t oh = 0; oh < OH; ++oh) {
      const float* r0 = plane + 2 * oh * W;
      const float* r1 = r0 + W;
      const float* drow = dp + oh * OW;
      float* d0 = dxp + 2 * oh * W;
      float* d1 = d0 + W;
      bool done = false;
#ifdef AMPD_HAS_AVX512_KERNELS
      if (wide) {
        MaxPool2x2BackwardRowAvx512(r0, r1, drow, OW, d0, d1, dxp + H * W);
        done = true;
      }
#endif
      if (!done) {
        AMPD_SIMD
        for (int64_t ow = 0; ow < OW; ++ow) {
          float m;
          const int k = First2x2Max(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1], &m);
          const float d = drow[ow];
          d0[2 * ow] = k == 0 ? d : 0.0f;
          d0[2 * ow + 1] = k == 1 ? d : 0.0f;
          d1[2 * ow] = k == 2 ? d : 0.0f;
          d1[2 * ow + 1] = k == 3 ? d : 0.0f;
        }
      }
      if (W > 2 * OW) d0[W - 1] = d1[W - 1] = 0.0f;
    }
    if (H > 2 * OH) std::fill(dxp + 2 * OH * W, dxp + H * W, 0.0f);
    StoreBlock(dxp, dx, p * H * W, H * W);
  });
  return dx;
}

}  // namespace

Tensor CpuBackendImpl::Pool2d(const Tensor& x, const Pool2dGeometry& g, DType out) {
  return UsesDouble(x) ? Pool2dImpl<double>(x, g, out) : Pool2dImpl<float>(x, g, out);
}

template <typename C>
Tensor CpuBackendImpl::Pool2dImpl(const Tensor& x, const Pool2dGeometry& g, DType out) {
  if constexpr (std::is_same_v<C, float>) {
    if (Is2x2Stride2Max(g)) return MaxPool2x2Planes(x, g, out, UseAvx512Rows());
  }
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::vector<int64_t> ys = backend::Pool2dOutputShape(x.shape(), g);
  const int64_t OH = ys[2], OW = ys[3];
  Values<C> xv(x);
  Output<C> y(ys, out);
  ParallelFor(planes, x.numel() >= kParallelMin, [&](int64_t p) {
    const C* plane = xv.data() + p * H * W;
    C* yp = y.data() + p * OH * OW;
    if (Is2x2Stride2Max(g)) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        const C* r0 = plane + 2 * oh * W;
        const C* r1 = r0 + W;
        C* out = yp + oh * OW;
        AMPD_SIMD
        for (int64_t ow = 0; ow < OW; ++ow) {
          C m;
          First2x2Max(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1], &m);
          out[ow] = m;
        }
      }
      return;
    }
    if (Unpadded(g)) {
      const int64_t k0 = g.kernel[0], k1 = g.kernel[1];
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t top = oh * g.stride[0], left = ow * g.stride[1];
          if (g.op == OpId::kMaxPool2d) {
            yp[oh * OW + ow] = plane[UnpaddedArgMax(plane, top, left, k0, k1, W)];
          } else {
            C sum = 0;
            for (int64_t i = 0; i < k0; ++i) {
              for (int64_t j = 0; j < k1; ++j) sum += plane[(top + i) * W + left + j];
            }
            yp[oh * OW + ow] = sum / static_cast<C>(k0 * k1);
          }
        }
      }
      return;
    }
    for (int64_t oh = 0; oh < OH; ++oh) {
      const PoolWindow wh = PoolWindowAt(g, 0, H, oh);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const PoolWindow ww = PoolWindowAt(g, 1, W, ow);
        if (g.op == OpId::kMaxPool2d) {
          const int64_t i = ArgMax(plane, wh, ww, W);
          yp[oh * OW + ow] = i < 0 ? -std::numeric_limits<C>::infinity() : plane[i];
        } else {
          C s = 0;
          ForTaps(wh, ww, W, [&](int64_t i) { s += plane[i]; });
          const int64_t div = wh.span * ww.span;
          yp[oh * OW + ow] = div > 0 ? s / static_cast<C>(div) : C(0);
        }
      }
    }
  });
  return y.Finish();
}

Tensor CpuBackendImpl::Pool2dBackward(const Tensor& x, const Tensor& dy, const Pool2dGeometry& g) {
  return UsesDouble(x) ? Pool2dBackwardImpl<double>(x, dy, g) : Pool2dBackwardImpl<float>(x, dy, g);
}

template <typename C>
Tensor CpuBackendImpl::Pool2dBackwardImpl(const Tensor& x, const Tensor& dy,
                                          const Pool2dGeometry& g) {
  if constexpr (std::is_same_v<C, float>) {
    if (Is2x2Stride2Max(g)) return MaxPool2x2BackwardPlanes(x, dy, UseAvx512Rows());
  }
  const int64_t planes = x.dim(0) * x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t OH = dy.dim(2), OW = dy.dim(3);
  Values<C> xv(x), dv(dy);
  Output<C> dx(x.shape(), x.dtype());
  ParallelFor(planes, x.numel() >= kParallelMin, [&](int64_t p) {
    const C* plane = xv.data() + p * H * W;
    const C* dp = dv.data() + p * OH * OW;
    C* dxp = dx.data() + p * H * W;
    if (Is2x2Stride2Max(g)) {
      // The windows tile the plane without overlap, so each of a window's
      // four values is written once, d where it is the window's first
      // maximum and 0 elsewhere (branch-free, vectorised); only an odd
      // last row or column, in no window, is zeroed separately.
      for (int64_t oh = 0; oh < OH; ++oh) {
        const C* r0 = plane + 2 * oh * W;
        const C* r1 = r0 + W;
        C* d0 = dxp + 2 * oh * W;
        C* d1 = d0 + W;
        const C* drow = dp + oh * OW;
        AMPD_SIMD
        for (int64_t ow = 0; ow < OW; ++ow) {
          C m;
          const int k = First2x2Max(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1], &m);
          const C d = drow[ow];
          d0[2 * ow] = k == 0 ? d : C(0);
          d0[2 * ow + 1] = k == 1 ? d : C(0);
          d1[2 * ow] = k == 2 ? d : C(0);
          d1[2 * ow + 1] = k == 3 ? d : C(0);
        }
        if (W > 2 * OW) d0[W - 1] = d1[W - 1] = C(0);
      }
      if (H > 2 * OH) std::fill(dxp + 2 * OH * W, dxp + H * W, C(0));
      return;
    }
    std::fill(dxp, dxp + H * W, C(0));
    if (Unpadded(g)) {
      const int64_t k0 = g.kernel[0], k1 = g.kernel[1];
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t top = oh * g.stride[0], left = ow * g.stride[1];
          const C d = dp[oh * OW + ow];
          if (g.op == OpId::kMaxPool2d) {
            dxp[UnpaddedArgMax(plane, top, left, k0, k1, W)] += d;
          } else {
            const C share = d / static_cast<C>(k0 * k1);
            for (int64_t i = 0; i < k0; ++i) {
              for (int64_t j = 0; j < k1; ++j) dxp[(top + i) * W + left + j] += share;
            }
          }
        }
      }
      return;
    }
    for (int64_t oh = 0; oh < OH; ++oh) {
      const PoolWindow wh = PoolWindowAt(g, 0, H, oh);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const PoolWindow ww = PoolWindowAt(g, 1, W, ow);
        const C d = dp[oh * OW + ow];
        if (g.op == OpId::kMaxPool2d) {
          const int64_t i = ArgMax(plane, wh, ww, W);
          if (i >= 0) dxp[i] += d;
        } else {
          const int64_t div = wh.span * ww.span;
          if (div == 0) continue;
          const C share = d / static_cast<C>(div);
          ForTaps(wh, ww, W, [&](int64_t i) { dxp[i] += share; });
        }
      }
    }
  });
  return dx.Finish();
}

AMPD_REGISTER_KERNEL(Pool2dKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Pool2d>::Call);
AMPD_REGISTER_KERNEL(Pool2dBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::Pool2dBackward>::Call);

}  // namespace ampd::engine::cpu
