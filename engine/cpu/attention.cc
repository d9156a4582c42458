// The CPU backend: fused causal self-attention (backend/kernels/attention.h),
// blocked over (batch, head) pairs across threads and over tiles of keys
// within a row, with an online softmax in the compute type (f32; f64 for f64
// input). Nothing of size T x T is ever stored: the backward recomputes each
// row's probabilities from its logsumexp, and each thread accumulates dK and
// dV for its own (batch, head) in row order, so no two threads write one
// value and the result does not depend on the thread count.
//
// On CPUs with AVX-512 and head sizes that are multiples of 16 (GPT-2's 64
// included), f32 attention runs hand-vectorised: each (batch, head)'s keys
// (and, for the backward, values) are transposed once so that 16 keys' scores
// come from one FMA per channel, the exponentials are vector ones
// (engine/cpu/avx512_math.h), and the value sums and gradients are FMAs over
// 16-channel chunks held in registers. The tiles, the online softmax and the
// row order are the portable loop's, so the cached kernel still equals the
// whole-sequence one bit for bit.

#include "engine/backend/kernels/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "engine/cpu/avx512_math.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

using backend::AttentionResult;
using backend::CachedAttentionKernel;
using backend::CausalAttentionBackwardKernel;
using backend::CausalAttentionKernel;
using backend::KernelMethod;

namespace {

constexpr int64_t kKeyTile = 64;

// Where q, k, v of (b, t, head) start in a [B*T, 3C] buffer.
struct QkvLayout {
  int64_t T, C, H, D;
  int64_t Q(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * 3 * C + h * D; }
  int64_t K(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + C; }
  int64_t V(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + 2 * C; }
  int64_t Y(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * C + h * D; }
};

template <typename C>
C Dot(const C* a, const C* b, int64_t n) {
  C s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One query row: softmax(q . k_j * scale) over keys j < n_keys (rows of
// `keys`/`values`, `stride` apart) times the values, into out[0, D), with an
// online softmax over tiles of kKeyTile keys. Returns the logsumexp. Both the
// whole-sequence kernel and the cached one compute every row here, which is
// what makes the cache exact.
template <typename C>
C AttendRow(const C* q, const C* keys, const C* values, int64_t stride, int64_t n_keys, int64_t D,
            C scale, C* s, C* out) {
  C acc[256];  // D <= 256 (ValidateGpt)
  std::fill(acc, acc + D, C(0));
  C m = -std::numeric_limits<C>::infinity(), l = 0;
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const int64_t j1 = std::min(n_keys, j0 + kKeyTile);
    C tile_max = m;
    for (int64_t j = j0; j < j1; ++j) {
      s[j - j0] = scale * Dot(q, keys + j * stride, D);
      tile_max = std::max(tile_max, s[j - j0]);
    }
    // Rescale what came before to the new maximum, once per tile.
    const C correction = std::exp(m - tile_max);
    l *= correction;
    for (int64_t d = 0; d < D; ++d) acc[d] *= correction;
    for (int64_t j = j0; j < j1; ++j) {
      const C p = std::exp(s[j - j0] - tile_max);
      l += p;
      const C* v = values + j * stride;
      for (int64_t d = 0; d < D; ++d) acc[d] += p * v[d];
    }
    m = tile_max;
  }
  for (int64_t d = 0; d < D; ++d) out[d] = acc[d] / l;
  return m + std::log(l);
}

#ifdef AMPD_HAS_AVX512_KERNELS

constexpr int64_t kMaxChunks = 16;  // D <= 256 (ValidateGpt), in 16-float chunks

// Rows [0, n) of one head (`stride` apart, D wide) transposed into
// out[d * ld + j], zero from n up to ld.
void TransposeHead(const float* rows, int64_t stride, int64_t n, int64_t D, int64_t ld,
                   float* out) {
  for (int64_t d = 0; d < D; ++d) {
    float* o = out + d * ld;
    for (int64_t j = 0; j < n; ++j) o[j] = rows[j * stride + d];
    std::fill(o + n, o + ld, 0.0f);
  }
}

int64_t PaddedKeys(int64_t n) { return (n + 15) / 16 * 16; }

// s[i] = q . keys (16 i + lane) of a tile, for G groups of 16 keys, from the
// transposed keys `kt` (channel d's row at kt + d * ld); with `g` and `vt`,
// also dp[i] = g . values likewise (the backward's dO . V). One broadcast and
// one FMA per channel and group, the G (or 2G) sums in registers.
template <int64_t D, int G>
__attribute__((always_inline)) AMPD_AVX512 inline void TileProductsOf(const float* q,
                                                                      const float* kt,
                                                                      const float* g,
                                                                      const float* vt, int64_t ld,
                                                                      __m512* s, __m512* dp) {
  __m512 a[G], b[G];
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) a[i] = b[i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const __m512 qd = _mm512_set1_ps(q[d]);
    const float* k = kt + d * ld;
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) a[i] = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k + 16 * i), a[i]);
    if (g != nullptr) {
      const __m512 gd = _mm512_set1_ps(g[d]);
      const float* v = vt + d * ld;
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) b[i] = _mm512_fmadd_ps(gd, _mm512_loadu_ps(v + 16 * i), b[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < G; ++i) {
    s[i] = a[i];
    if (dp != nullptr) dp[i] = b[i];
  }
}

template <int64_t D>
__attribute__((always_inline)) AMPD_AVX512 inline void TileProducts(int groups, const float* q,
                                                                    const float* kt, const float* g,
                                                                    const float* vt, int64_t ld,
                                                                    __m512* s, __m512* dp) {
  switch (groups) {
    case 1:
      return TileProductsOf<D, 1>(q, kt, g, vt, ld, s, dp);
    case 2:
      return TileProductsOf<D, 2>(q, kt, g, vt, ld, s, dp);
    case 3:
      return TileProductsOf<D, 3>(q, kt, g, vt, ld, s, dp);
    default:
      return TileProductsOf<D, 4>(q, kt, g, vt, ld, s, dp);
  }
}

AMPD_AVX512 inline float ReduceMax(__m512 v) { return _mm512_reduce_max_ps(v); }
AMPD_AVX512 inline float ReduceAdd(__m512 v) { return _mm512_reduce_add_ps(v); }

// AttendRow for f32 with D = 16 * NC: `kt` holds the keys transposed
// (TransposeHead, leading dimension ld), `values` the value rows.
template <int NC>
AMPD_AVX512 float AttendRowAvx512(const float* q, const float* kt, int64_t ld, const float* values,
                                  int64_t stride, int64_t n_keys, float scale, float* out) {
  constexpr int64_t D = 16 * NC;
  static_assert(kKeyTile == 64, "four 16-key groups per tile");
  __m512 acc[NC];
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
  float m = -std::numeric_limits<float>::infinity(), l = 0;
  alignas(64) float p[kKeyTile];
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const int64_t nt = std::min(kKeyTile, n_keys - j0);
    const int groups = static_cast<int>((nt + 15) / 16);
    __m512 s[4];
    TileProducts<D>(groups, q, kt + j0, nullptr, nullptr, ld, s, nullptr);
    const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __mmask16 valid[4] = {0, 0, 0, 0};
    __m512 vmax = minus_inf;
#pragma GCC unroll 16
    for (int g = 0; g < groups; ++g) {
      valid[g] = FirstLanes(nt - 16 * g);
      s[g] = _mm512_mask_mul_ps(minus_inf, valid[g], s[g], _mm512_set1_ps(scale));
      vmax = _mm512_max_ps(vmax, s[g]);
    }
    const float tile_max = std::max(m, ReduceMax(vmax));
    // Rescale what came before to the new maximum, once per tile.
    const float correction = std::exp(m - tile_max);
    l *= correction;
    const __m512 corr = _mm512_set1_ps(correction);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_mul_ps(acc[c], corr);
    __m512 psum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int g = 0; g < groups; ++g) {
      const __m512 pg = MaskedExp16(valid[g], _mm512_sub_ps(s[g], _mm512_set1_ps(tile_max)));
      psum = _mm512_add_ps(psum, pg);
      _mm512_store_ps(p + 16 * g, pg);
    }
    l += ReduceAdd(psum);
    for (int64_t j = 0; j < nt; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const float* v = values + (j0 + j) * stride;
#pragma GCC unroll 16
      for (int c = 0; c < NC; ++c)
        acc[c] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v + 16 * c), acc[c]);
    }
    m = tile_max;
  }
  const __m512 lv = _mm512_set1_ps(l);
#pragma GCC unroll 16
  for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_div_ps(acc[c], lv));
  return m + std::log(l);
}

// One (batch, head) of the backward, f32 with D = 16 * NC: the portable
// loop's single pass over the query rows, with the row's scores and dO . V
// for 64 keys at a time from the transposed keys and values.
struct HeadBackwardArgs {
  const float *x, *o, *g, *lse;  // qkv, attention output, its gradient, logsumexp rows
  QkvLayout L;
  int64_t b, h;
  float scale;
};

struct HeadScratch {
  std::vector<float> kt, vt, dk, dv, p, ds;
  void Resize(int64_t T, int64_t D, int64_t ld) {
    kt.resize(D * ld);
    vt.resize(D * ld);
    dk.assign(T * D, 0.0f);
    dv.assign(T * D, 0.0f);
    p.resize(2 * ld);  // two rows at a time
    ds.resize(2 * ld);
  }
};

// Rows i0 .. i0 + R - 1 of one (batch, head)'s backward: each row's
// probabilities p and dS for its keys (TileProducts, 64 at a time), then one
// pass over the keys j <= i0 + R - 1 that adds every row's share to dK_j and
// dV_j (in row order, as one row at a time would) while dK_j and dV_j are in
// registers, so a pair of rows loads and stores them once instead of twice.
template <int NC, int R>
AMPD_AVX512 inline void AttentionBackwardRowsAvx512(const HeadBackwardArgs& a, HeadScratch& w,
                                                    int64_t i0, float* dx) {
  constexpr int64_t D = 16 * NC;
  const QkvLayout& L = a.L;
  const int64_t T = L.T, ld = PaddedKeys(T);
  const __m512 scale = _mm512_set1_ps(a.scale);
  const int64_t keys = i0 + R;  // keys any of the rows sees
  const float* q[R];
  const float* gi[R];
  float* p[R];
  float* ds[R];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + r;
    q[r] = a.x + L.Q(a.b, i, a.h);
    gi[r] = a.g + L.Y(a.b, i, a.h);
    p[r] = w.p.data() + r * ld;
    ds[r] = w.ds.data() + r * ld;
    const float* oi = a.o + L.Y(a.b, i, a.h);
    __m512 delta_v = _mm512_setzero_ps();  // dO_i . O_i
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      delta_v =
          _mm512_fmadd_ps(_mm512_loadu_ps(gi[r] + 16 * c), _mm512_loadu_ps(oi + 16 * c), delta_v);
    }
    const __m512 delta = _mm512_set1_ps(ReduceAdd(delta_v));
    const __m512 row_lse = _mm512_set1_ps(a.lse[(a.b * L.H + a.h) * T + i]);
    const int64_t n = i + 1;
    for (int64_t j0 = 0; j0 < n; j0 += kKeyTile) {
      const int64_t nt = std::min(kKeyTile, n - j0);
      const int groups = static_cast<int>((nt + 15) / 16);
      __m512 sc[4], dp[4];
      TileProducts<D>(groups, q[r], w.kt.data() + j0, gi[r], w.vt.data() + j0, ld, sc, dp);
#pragma GCC unroll 16
      for (int g = 0; g < groups; ++g) {
        const __mmask16 valid = FirstLanes(nt - 16 * g);
        const __m512 pg = MaskedExp16(valid, _mm512_fmsub_ps(sc[g], scale, row_lse));
        const __m512 dsg =
            _mm512_maskz_mul_ps(valid, _mm512_mul_ps(pg, _mm512_sub_ps(dp[g], delta)), scale);
        _mm512_storeu_ps(p[r] + j0 + 16 * g, pg);
        _mm512_storeu_ps(ds[r] + j0 + 16 * g, dsg);
      }
    }
  }
  __m512 dq[R][NC];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) dq[r][c] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < keys; ++j) {
    const float* k = a.x + L.K(a.b, j, a.h);
    float* dkj = w.dk.data() + j * D;
    float* dvj = w.dv.data() + j * D;
    // Rows before key j (only in a pair's last key) take no part.
    const int first = static_cast<int>(std::max<int64_t>(0, j - i0));
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      const __m512 kc = _mm512_loadu_ps(k + 16 * c);
      __m512 dk = _mm512_loadu_ps(dkj + 16 * c), dv = _mm512_loadu_ps(dvj + 16 * c);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        if (r < first) continue;
        const __m512 dsj = _mm512_set1_ps(ds[r][j]), pj = _mm512_set1_ps(p[r][j]);
        dq[r][c] = _mm512_fmadd_ps(dsj, kc, dq[r][c]);
        dk = _mm512_fmadd_ps(dsj, _mm512_loadu_ps(q[r] + 16 * c), dk);
        dv = _mm512_fmadd_ps(pj, _mm512_loadu_ps(gi[r] + 16 * c), dv);
      }
      _mm512_storeu_ps(dkj + 16 * c, dk);
      _mm512_storeu_ps(dvj + 16 * c, dv);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
    float* dqi = dx + L.Q(a.b, i0 + r, a.h);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(dqi + 16 * c, dq[r][c]);
  }
}

// One (batch, head) of the backward, f32 with D = 16 * NC: the portable
// loop's single pass over the query rows, two rows at a time.
template <int NC>
AMPD_AVX512 void AttentionBackwardHeadAvx512(const HeadBackwardArgs& a, HeadScratch& w, float* dx) {
  constexpr int64_t D = 16 * NC;
  const QkvLayout& L = a.L;
  const int64_t T = L.T, ld = PaddedKeys(T);
  w.Resize(T, D, ld);
  TransposeHead(a.x + L.K(a.b, 0, a.h), 3 * L.C, T, D, ld, w.kt.data());
  TransposeHead(a.x + L.V(a.b, 0, a.h), 3 * L.C, T, D, ld, w.vt.data());
  int64_t i = 0;
  for (; i + 2 <= T; i += 2) AttentionBackwardRowsAvx512<NC, 2>(a, w, i, dx);
  if (i < T) AttentionBackwardRowsAvx512<NC, 1>(a, w, i, dx);
  for (int64_t j = 0; j < T; ++j) {
    std::copy(w.dk.begin() + j * D, w.dk.begin() + (j + 1) * D, dx + L.K(a.b, j, a.h));
    std::copy(w.dv.begin() + j * D, w.dv.begin() + (j + 1) * D, dx + L.V(a.b, j, a.h));
  }
}

using RowAvx512Fn = float (*)(const float*, const float*, int64_t, const float*, int64_t, int64_t,
                              float, float*);
using HeadBackwardAvx512Fn = void (*)(const HeadBackwardArgs&, HeadScratch&, float*);

template <size_t... I>
constexpr std::array<RowAvx512Fn, sizeof...(I)> RowFns(std::index_sequence<I...>) {
  return {&AttendRowAvx512<static_cast<int>(I) + 1>...};
}
template <size_t... I>
constexpr std::array<HeadBackwardAvx512Fn, sizeof...(I)> BackwardFns(std::index_sequence<I...>) {
  return {&AttentionBackwardHeadAvx512<static_cast<int>(I) + 1>...};
}
constexpr auto kRowAvx512 = RowFns(std::make_index_sequence<kMaxChunks>());
constexpr auto kBackwardAvx512 = BackwardFns(std::make_index_sequence<kMaxChunks>());

// The AVX-512 kernels take f32 heads of 16..256 channels in steps of 16.
bool Avx512Head(int64_t D) {
  return D % 16 == 0 && D / 16 >= 1 && D / 16 <= kMaxChunks && UseAvx512Kernels();
}

#endif  // AMPD_HAS_AVX512_KERNELS

}  // namespace

AttentionResult CpuBackendImpl::CausalAttention(const Tensor& qkv, int64_t seq_len,
                                                int64_t n_head) {
  return UsesDouble(qkv) ? CausalAttentionImpl<double>(qkv, seq_len, n_head)
                         : CausalAttentionImpl<float>(qkv, seq_len, n_head);
}

template <typename C>
AttentionResult CpuBackendImpl::CausalAttentionImpl(const Tensor& qkv, int64_t seq_len,
                                                    int64_t n_head) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C3 = qkv.dim(1);
  const QkvLayout L{T, C3 / 3, n_head, C3 / 3 / n_head};
  const C scale = C(1) / std::sqrt(C(L.D));
  Values<C> in(qkv);
  const C* x = in.data();
  Output<C> y({B * T, L.C}, qkv.dtype());
  Output<C> lse({B, n_head, T}, std::is_same_v<C, double> ? DType::kF64 : DType::kF32);
#ifdef AMPD_HAS_AVX512_KERNELS
  if constexpr (std::is_same_v<C, float>) {
    if (Avx512Head(L.D)) {
      const RowAvx512Fn row = kRowAvx512[L.D / 16 - 1];
      const int64_t ld = PaddedKeys(T);
#pragma omp parallel for schedule(dynamic)
      for (int64_t bh = 0; bh < B * n_head; ++bh) {
        const int64_t b = bh / n_head, h = bh % n_head;
        std::vector<float> kt(L.D * ld);
        TransposeHead(x + L.K(b, 0, h), 3 * L.C, T, L.D, ld, kt.data());
        for (int64_t i = 0; i < T; ++i) {
          lse[bh * T + i] = row(x + L.Q(b, i, h), kt.data(), ld, x + L.V(b, 0, h), 3 * L.C, i + 1,
                                scale, y.data() + L.Y(b, i, h));
        }
      }
      return {y.Finish(), lse.Finish()};
    }
  }
#endif
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    std::vector<C> s(kKeyTile);
    for (int64_t i = 0; i < T; ++i) {
      const C* keys = x + L.K(b, 0, h);
      const C* values = x + L.V(b, 0, h);
      lse[bh * T + i] = AttendRow(x + L.Q(b, i, h), keys, values, 3 * L.C, i + 1, L.D, scale,
                                  s.data(), y.data() + L.Y(b, i, h));
    }
  }
  return {y.Finish(), lse.Finish()};
}

Tensor CpuBackendImpl::CausalAttentionBackward(const Tensor& qkv, const Tensor& y,
                                               const Tensor& lse, const Tensor& dy, int64_t seq_len,
                                               int64_t n_head) {
  return UsesDouble(qkv) ? CausalAttentionBackwardImpl<double>(qkv, y, lse, dy, seq_len, n_head)
                         : CausalAttentionBackwardImpl<float>(qkv, y, lse, dy, seq_len, n_head);
}

template <typename C>
Tensor CpuBackendImpl::CausalAttentionBackwardImpl(const Tensor& qkv, const Tensor& y,
                                                   const Tensor& lse, const Tensor& dy,
                                                   int64_t seq_len, int64_t n_head) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C3 = qkv.dim(1);
  const QkvLayout L{T, C3 / 3, n_head, C3 / 3 / n_head};
  const C scale = C(1) / std::sqrt(C(L.D));
  Values<C> in(qkv), yv(y), gv(dy), lv(lse);
  const C *x = in.data(), *o = yv.data(), *g = gv.data(), *ls = lv.data();
  Output<C> dx(qkv.shape(), qkv.dtype());
#ifdef AMPD_HAS_AVX512_KERNELS
  if constexpr (std::is_same_v<C, float>) {
    if (Avx512Head(L.D)) {
      const HeadBackwardAvx512Fn head = kBackwardAvx512[L.D / 16 - 1];
#pragma omp parallel
      {
        HeadScratch scratch;
#pragma omp for schedule(dynamic)
        for (int64_t bh = 0; bh < B * n_head; ++bh) {
          head(HeadBackwardArgs{x, o, g, ls, L, bh / n_head, bh % n_head, scale}, scratch,
               dx.data());
        }
      }
      return dx.Finish();
    }
  }
#endif
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    // One pass over the query rows: row i's probabilities (at most T values,
    // never the matrix) give dQ_i, and add to dK_j and dV_j, which this
    // thread alone owns for its (b, h) and sums in row order.
    std::vector<C> p(T), ds(T), dk(T * L.D, C(0)), dv(T * L.D, C(0));
    for (int64_t i = 0; i < T; ++i) {
      const C* q = x + L.Q(b, i, h);
      const C* gi = g + L.Y(b, i, h);
      const C delta = Dot(gi, o + L.Y(b, i, h), L.D);  // dO_i . O_i
      const C row_lse = ls[bh * T + i];
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(scale * Dot(q, x + L.K(b, j, h), L.D) - row_lse);
        ds[j] = p[j] * (Dot(gi, x + L.V(b, j, h), L.D) - delta) * scale;
      }
      C* dq = dx.data() + L.Q(b, i, h);
      std::fill(dq, dq + L.D, C(0));
      for (int64_t j = 0; j <= i; ++j) {
        const C* k = x + L.K(b, j, h);
        C* dkj = dk.data() + j * L.D;
        C* dvj = dv.data() + j * L.D;
        const C dsj = ds[j], pj = p[j];
#pragma omp simd
        for (int64_t d = 0; d < L.D; ++d) {
          dq[d] += dsj * k[d];
          dkj[d] += dsj * q[d];
          dvj[d] += pj * gi[d];
        }
      }
    }
    for (int64_t j = 0; j < T; ++j) {
      std::copy(dk.begin() + j * L.D, dk.begin() + (j + 1) * L.D, dx.data() + L.K(b, j, h));
      std::copy(dv.begin() + j * L.D, dv.begin() + (j + 1) * L.D, dx.data() + L.V(b, j, h));
    }
  }
  return dx.Finish();
}

Tensor CpuBackendImpl::CachedAttention(const Tensor& qkv, const Tensor& k_cache,
                                       const Tensor& v_cache, int64_t past, int64_t n_head) {
  return UsesDouble(qkv) ? CachedAttentionImpl<double>(qkv, k_cache, v_cache, past, n_head)
                         : CachedAttentionImpl<float>(qkv, k_cache, v_cache, past, n_head);
}

template <typename C>
Tensor CpuBackendImpl::CachedAttentionImpl(const Tensor& qkv, const Tensor& k_cache,
                                           const Tensor& v_cache, int64_t past, int64_t n_head) {
  const int64_t B = k_cache.dim(0), max_len = k_cache.dim(1), E = k_cache.dim(2);
  const int64_t n = qkv.dim(0) / B, D = E / n_head;
  // The new rows' k and v into the caches, as stored (qkv's dtype).
  const size_t es = DTypeSize(qkv.dtype());
  const auto* src = static_cast<const uint8_t*>(qkv.raw());
  auto* kc = static_cast<uint8_t*>(k_cache.raw());
  auto* vc = static_cast<uint8_t*>(v_cache.raw());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* row = src + (b * n + i) * 3 * E * es;
      const int64_t at = (b * max_len + past + i) * E * es;
      std::memcpy(kc + at, row + E * es, E * es);
      std::memcpy(vc + at, row + 2 * E * es, E * es);
    }
  }
  const C scale = C(1) / std::sqrt(C(D));
  Values<C> in(qkv), kv(k_cache), vv(v_cache);
  Output<C> y({B * n, E}, qkv.dtype());
#ifdef AMPD_HAS_AVX512_KERNELS
  if constexpr (std::is_same_v<C, float>) {
    if (Avx512Head(D)) {
      const RowAvx512Fn row = kRowAvx512[D / 16 - 1];
      const int64_t keys = past + n, ld = PaddedKeys(keys);
#pragma omp parallel for schedule(dynamic)
      for (int64_t bh = 0; bh < B * n_head; ++bh) {
        const int64_t b = bh / n_head, h = bh % n_head;
        std::vector<float> kt(D * ld);
        TransposeHead(kv.data() + b * max_len * E + h * D, E, keys, D, ld, kt.data());
        const float* values = vv.data() + b * max_len * E + h * D;
        for (int64_t i = 0; i < n; ++i) {
          row(in.data() + (b * n + i) * 3 * E + h * D, kt.data(), ld, values, E, past + i + 1,
              scale, y.data() + (b * n + i) * E + h * D);
        }
      }
      return y.Finish();
    }
  }
#endif
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    std::vector<C> s(kKeyTile);
    const C* keys = kv.data() + b * max_len * E + h * D;
    const C* values = vv.data() + b * max_len * E + h * D;
    for (int64_t i = 0; i < n; ++i) {
      AttendRow(in.data() + (b * n + i) * 3 * E + h * D, keys, values, E, past + i + 1, D, scale,
                s.data(), y.data() + (b * n + i) * E + h * D);
    }
  }
  return y.Finish();
}

AMPD_REGISTER_KERNEL(CausalAttentionKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CausalAttention>::Call);
AMPD_REGISTER_KERNEL(CausalAttentionBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CausalAttentionBackward>::Call);
AMPD_REGISTER_KERNEL(CachedAttentionKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CachedAttention>::Call);

}  // namespace ampd::engine::cpu
