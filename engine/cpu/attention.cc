// The CPU backend: fused causal self-attention (backend/kernels/attention.h),
// shared across threads as tasks of one sequence's heads: all of them when
// there are at least twice as many sequences as threads (the sequence's rows
// are then one contiguous span, widened from bf16 / f16 in one pass and its
// results rounded back in one), else one head per task. Each head's
// arithmetic is the same either way, and so are the results.
//
// Forward: tiles of keys within a row, with an online softmax in the compute
// type (f32; f64 for f64 input). Nothing of size T x T is stored. On CPUs
// with AVX-512 and head sizes that are multiples of 16 (GPT-2's 64
// included), f32 rows run hand-vectorised: the head's keys are transposed
// once so that 16 keys' scores come from one FMA per channel, the
// exponentials are vector ones (engine/cpu/avx512_math.h), and the value sums
// are FMAs over 16-channel chunks held in registers. The tiles, the online
// softmax and the row order are the portable loop's, so the cached kernel
// still equals the whole-sequence one bit for bit.
//
// Backward, f32: GEMMs over blocks of query rows (AttentionBackwardHeadGemm),
// recomputing the probabilities from the saved logsumexp. bf16, where oneDNN
// has a bf16 matmul: the same blocks on bf16 GEMMs, with P and dS rounded to
// bf16 before their products as flash attention's backward and the CUDA
// kernels do (AttentionBackwardHeadBf16): at gpt_bench's shape 1.7x the
// widened f32 path on an AMX Xeon, even with it on Zen 4 (attention_bench).
// f64: the portable loop, one query row at a time. Either way each thread
// accumulates dK and dV for its own (batch, head), so no two threads write one value.
//
// Dropout on the probabilities (backend::AttentionDropout): the forward drops
// a tile's probabilities after the row sum has taken them and before they
// meet V (RowDrop, DropRow: dropout_mask.h's 16 at a time with AVX-512
// DQ); the backward masks dP = dO V^T before dS and P after it
// (DroppedScoreGrads), regenerating the forward's mask.

#include "engine/backend/kernels/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "engine/core/half.h"
#include "engine/cpu/avx512_math.h"
#include "engine/cpu/capabilities.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/dropout_mask.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

using backend::AttentionDropout;
using backend::AttentionKeep;
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

// The n values of t from `offset` as f32 in out (copied, or widened from
// t's storage type).
void LoadRow(const Tensor& t, int64_t offset, int64_t n, float* out) {
  const float* src = LoadBlock(t, offset, n, out);
  if (src != out) std::memcpy(out, src, n * sizeof(float));
}

// Sequence b's rows of heads [h0, h0 + hc) of qkv as f32 in dst, a row's
// heads' Q, then K, then V (3 hc D values a row): one span when the heads
// are all of them (qkv's own layout), else three pieces a row.
void LoadSequenceQkv(const Tensor& qkv, const QkvLayout& L, int64_t b, int64_t h0, int64_t hc,
                     float* dst) {
  const int64_t S = 3 * hc * L.D;
  if (hc == L.H) return LoadRow(qkv, L.Q(b, 0, 0), L.T * S, dst);
  for (int64_t i = 0; i < L.T; ++i) {
    LoadRow(qkv, L.Q(b, i, h0), hc * L.D, &dst[i * S]);
    LoadRow(qkv, L.K(b, i, h0), hc * L.D, &dst[i * S + hc * L.D]);
    LoadRow(qkv, L.V(b, i, h0), hc * L.D, &dst[i * S + 2 * hc * L.D]);
  }
}

// The attention dropout of one query row (backend::AttentionDropout):
// probability j of the row is index0 + j in the mask's numbering.
template <typename C>
struct RowDrop {
  uint64_t seed, threshold, index0;
  C keep_scale;
  bool Keep(int64_t j) const { return AttentionKeep(seed, threshold, index0 + j); }
  C Apply(C x, int64_t j) const { return Keep(j) ? x * keep_scale : C(0); }
};
// Row i of (batch, head) bh's drop, or none when the dropout is off.
template <typename C>
std::optional<RowDrop<C>> DropOfRow(const AttentionDropout& d, int64_t bh, int64_t T, int64_t i) {
  if (!d.active()) return std::nullopt;
  return RowDrop<C>{d.seed, d.Threshold(), static_cast<uint64_t>((bh * T + i) * T),
                    static_cast<C>(d.KeepScale())};
}

// x[j] for j in [0, n) of a row, dropped (RowDrop::Apply).
void DropRow(const RowDrop<float>& d, float* x, int64_t n) {
#ifdef AMPD_HAS_AVX512_KERNELS
  if (UseAvx512DropoutMask()) {
    return DropoutRow16(d.seed, d.index0, d.threshold, d.keep_scale, x, x, n);
  }
#endif
  for (int64_t j = 0; j < n; ++j) x[j] = d.Apply(x[j], j);
}

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
// what makes the cache exact. With `drop`, the probabilities that meet the
// values are dropped (the sum l is over all of them).
template <typename C>
C AttendRow(const C* q, const C* keys, const C* values, int64_t stride, int64_t n_keys, int64_t D,
            C scale, C* s, C* out, const RowDrop<C>* drop = nullptr) {
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
      const C pv = drop != nullptr ? drop->Apply(p, j) : p;
      const C* v = values + j * stride;
      for (int64_t d = 0; d < D; ++d) acc[d] += pv * v[d];
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

// s[r][i] = q_r . keys (16 i + lane) of a tile, for R query rows (D apart
// in q) and G groups of 16 keys, from the transposed keys `kt` (channel d's
// row at kt + d * ld): per channel, one load a group shared by the rows, one
// broadcast and one FMA a row and group, the sums in registers.
template <int64_t D, int G, int R>
__attribute__((always_inline)) AMPD_AVX512 inline void TileScoresOf(const float* q, const float* kt,
                                                                    int64_t ld, __m512 (*s)[4]) {
  __m512 a[R][G];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) a[r][i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const float* k = kt + d * ld;
    __m512 qd[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) qd[r] = _mm512_set1_ps(q[r * D + d]);
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) {
      const __m512 ki = _mm512_loadu_ps(k + 16 * i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r][i] = _mm512_fmadd_ps(qd[r], ki, a[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) s[r][i] = a[r][i];
}

template <int64_t D, int R>
__attribute__((always_inline)) AMPD_AVX512 inline void TileScores(int groups, const float* q,
                                                                  const float* kt, int64_t ld,
                                                                  __m512 (*s)[4]) {
  switch (groups) {
    case 1:
      return TileScoresOf<D, 1, R>(q, kt, ld, s);
    case 2:
      return TileScoresOf<D, 2, R>(q, kt, ld, s);
    case 3:
      return TileScoresOf<D, 3, R>(q, kt, ld, s);
    default:
      return TileScoresOf<D, 4, R>(q, kt, ld, s);
  }
}

AMPD_AVX512 inline float ReduceMax(__m512 v) { return _mm512_reduce_max_ps(v); }
AMPD_AVX512 inline float ReduceAdd(__m512 v) { return _mm512_reduce_add_ps(v); }

// AttendRow for f32 with D = 16 * NC, for R consecutive query rows at once:
// row r (at q + r * D, out + r * D) sees n_keys + r keys. `kt` holds the keys
// transposed (TransposeHead, leading dimension ld), `values` the value rows.
// The rows share each tile's loads of keys and values; every row's
// arithmetic, and so its result, is the one-row kernel's (R = 1), which
// cached attention uses. For R > 1, n_keys % kKeyTile != 0: the rows have the
// same tiles. Writes each row's logsumexp to lse[r]. With `drop` (row 0's;
// row r's mask starts drop_stride later), the probabilities that meet the
// values are dropped after the sum l has taken them.
template <int NC, int R>
AMPD_AVX512 void AttendRowsAvx512(const float* q, const float* kt, int64_t ld, const float* values,
                                  int64_t stride, int64_t n_keys, float scale, float* out,
                                  float* lse, const RowDrop<float>* drop, int64_t drop_stride) {
  constexpr int64_t D = 16 * NC;
  static_assert(kKeyTile == 64, "four 16-key groups per tile");
  __m512 acc[R][NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  float m[R], l[R];
  for (int r = 0; r < R; ++r) {
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0;
  }
  alignas(64) float p[R][kKeyTile];
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    int64_t nt[R];
    int groups[R];
    for (int r = 0; r < R; ++r) {
      nt[r] = std::min(kKeyTile, n_keys + r - j0);
      groups[r] = static_cast<int>((nt[r] + 15) / 16);
    }
    __m512 s[R][4];
    TileScores<D, R>(groups[R - 1], q, kt + j0, ld, s);
    const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __mmask16 valid[4] = {0, 0, 0, 0};
      __m512 vmax = minus_inf;
#pragma GCC unroll 16
      for (int g = 0; g < groups[r]; ++g) {
        valid[g] = FirstLanes(nt[r] - 16 * g);
        s[r][g] = _mm512_mask_mul_ps(minus_inf, valid[g], s[r][g], _mm512_set1_ps(scale));
        vmax = _mm512_max_ps(vmax, s[r][g]);
      }
      const float tile_max = std::max(m[r], ReduceMax(vmax));
      // Rescale what came before to the new maximum, once per tile.
      const float correction = std::exp(m[r] - tile_max);
      l[r] *= correction;
      const __m512 corr = _mm512_set1_ps(correction);
#pragma GCC unroll 16
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_mul_ps(acc[r][c], corr);
      __m512 psum = _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int g = 0; g < groups[r]; ++g) {
        const __m512 pg = MaskedExp16(valid[g], _mm512_sub_ps(s[r][g], _mm512_set1_ps(tile_max)));
        psum = _mm512_add_ps(psum, pg);
        _mm512_store_ps(p[r] + 16 * g, pg);
      }
      l[r] += ReduceAdd(psum);
      m[r] = tile_max;
      if (drop != nullptr) {
        RowDrop<float> row = *drop;
        row.index0 += r * drop_stride + j0;
        DropRow(row, p[r], nt[r]);
      }
    }
    // The keys every row sees, then each later row's extra ones alone.
    for (int64_t j = 0; j < nt[0]; ++j) {
      const float* v = values + (j0 + j) * stride;
      __m512 pj[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) pj[r] = _mm512_set1_ps(p[r][j]);
#pragma GCC unroll 16
      for (int c = 0; c < NC; ++c) {
        const __m512 vc = _mm512_loadu_ps(v + 16 * c);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(pj[r], vc, acc[r][c]);
      }
    }
    for (int r = 1; r < R; ++r) {
      for (int64_t j = nt[0]; j < nt[r]; ++j) {
        const __m512 pj = _mm512_set1_ps(p[r][j]);
        const float* v = values + (j0 + j) * stride;
#pragma GCC unroll 16
        for (int c = 0; c < NC; ++c)
          acc[r][c] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v + 16 * c), acc[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m512 lv = _mm512_set1_ps(l[r]);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c)
      _mm512_storeu_ps(out + r * D + 16 * c, _mm512_div_ps(acc[r][c], lv));
    lse[r] = m[r] + std::log(l[r]);
  }
}

// The one-row kernel, returning the logsumexp.
template <int NC>
AMPD_AVX512 float AttendRowAvx512(const float* q, const float* kt, int64_t ld, const float* values,
                                  int64_t stride, int64_t n_keys, float scale, float* out,
                                  const RowDrop<float>* drop) {
  float lse;
  AttendRowsAvx512<NC, 1>(q, kt, ld, values, stride, n_keys, scale, out, &lse, drop, 0);
  return lse;
}

using RowAvx512Fn = float (*)(const float*, const float*, int64_t, const float*, int64_t, int64_t,
                              float, float*, const RowDrop<float>*);
using RowPairAvx512Fn = void (*)(const float*, const float*, int64_t, const float*, int64_t,
                                 int64_t, float, float*, float*, const RowDrop<float>*, int64_t);

template <size_t... I>
constexpr std::array<RowAvx512Fn, sizeof...(I)> RowFns(std::index_sequence<I...>) {
  return {&AttendRowAvx512<static_cast<int>(I) + 1>...};
}
constexpr auto kRowAvx512 = RowFns(std::make_index_sequence<kMaxChunks>());

// Two rows at a time up to 128 channels (two rows' accumulators and scores
// fit in the 32 vector registers); wider heads go a row at a time.
constexpr int kMaxPairChunks = 8;
template <size_t... I>
constexpr std::array<RowPairAvx512Fn, sizeof...(I)> RowPairFns(std::index_sequence<I...>) {
  return {&AttendRowsAvx512<static_cast<int>(I) + 1, 2>...};
}
constexpr auto kRowPairAvx512 = RowPairFns(std::make_index_sequence<kMaxPairChunks>());

// The AVX-512 kernels take f32 heads of 16..256 channels in steps of 16.
bool Avx512Head(int64_t D) {
  return D % 16 == 0 && D / 16 >= 1 && D / 16 <= kMaxChunks && UseAvx512Kernels();
}

// ScoreGrads 16 keys at a time (the keys past row i masked to 0).
AMPD_AVX512 void ScoreGradsAvx512(const float* lse, const float* delta, int64_t r0, int64_t r1,
                                  float scale, float* s, float* dp) {
  const int64_t n = r1;
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t i = r0; i < r1; ++i) {
    float* si = s + (i - r0) * n;
    float* dpi = dp + (i - r0) * n;
    const __m512 row_lse = _mm512_set1_ps(lse[i]), row_delta = _mm512_set1_ps(delta[i]);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 lanes = FirstLanes(n - j);
      const __mmask16 valid = FirstLanes(std::max<int64_t>(0, i + 1 - j)) & lanes;
      const __m512 p =
          MaskedExp16(valid, _mm512_fmsub_ps(_mm512_maskz_loadu_ps(lanes, si + j), sc, row_lse));
      const __m512 ds = _mm512_maskz_mul_ps(
          valid, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, dpi + j), row_delta)),
          sc);
      _mm512_mask_storeu_ps(si + j, lanes, p);
      _mm512_mask_storeu_ps(dpi + j, lanes, ds);
    }
  }
}

#endif  // AMPD_HAS_AVX512_KERNELS

// The f32 backward of one (batch, head) as GEMMs over blocks of query rows
// (GemmF32: oneDNN on the calling thread). Block [r0, r1) sees keys
// [0, r1), so the causal mask skips whole key columns past the block:
//   S = Q_blk K^T, dP = dO_blk V^T               (scores and dO . V)
//   P = exp(scale S - lse), dS = P (dP - delta) scale, both 0 above the diagonal
//   dQ_blk = dS K, dK += dS^T Q_blk, dV += P^T dO_blk.
// The block is kRowBlock rows, so S is never larger than kRowBlock x T.
// The heads are first gathered into dense [T, D] copies; dK and dV are this
// thread's own for its (b, h), summed over the blocks in order.
constexpr int64_t kRowBlock = 64;

// One task's rows as f32: the rows of one sequence for its heads
// [h0, h0 + hc), all of a row's values for those heads side by side.
struct SeqSpans {
  const float* qkv;  // row i at qkv + i * 3 hc D: the hc heads' q, then k, then v
  const float* y;    // row i at y + i * hc D
  const float* dy;   // as y
  float* dx;         // as qkv
  int64_t hc;
};

struct HeadBackwardArgs {
  const SeqSpans* rows;
  int64_t hl;        // the head's place in rows
  const float* lse;  // logsumexp rows
  QkvLayout L;
  int64_t b, h;
  float scale;
  const AttentionDropout* dropout;
};

struct GemmScratch {
  std::vector<float> q, k, v, go, o, delta, s, dp, dq, dk, dv, part;
  void Resize(int64_t T, int64_t D) {
    for (auto* m : {&q, &k, &v, &go, &dq, &part}) m->resize(T * D);
    o.resize(D);
    delta.resize(T);
    s.resize(std::min(kRowBlock, T) * T);
    dp.resize(std::min(kRowBlock, T) * T);
    dk.assign(T * D, 0.0f);
    dv.assign(T * D, 0.0f);
  }
};

// Rows [r0, r1) of S (in s) and dP (in dp), n = r1 columns each, become P
// and dS in place; lse and delta: the head's rows.
void ScoreGrads(const float* lse, const float* delta, float scale, int64_t r0, int64_t r1, float* s,
                float* dp) {
  const int64_t n = r1;
#ifdef AMPD_HAS_AVX512_KERNELS
  if (UseAvx512Kernels()) return ScoreGradsAvx512(lse, delta, r0, r1, scale, s, dp);
#endif
  for (int64_t i = r0; i < r1; ++i) {
    float* si = s + (i - r0) * n;
    float* dpi = dp + (i - r0) * n;
    for (int64_t j = 0; j < n; ++j) {
      const float p = j <= i ? std::exp(scale * si[j] - lse[i]) : 0.0f;
      dpi[j] = j <= i ? p * (dpi[j] - delta[i]) * scale : 0.0f;
      si[j] = p;
    }
  }
}

// ScoreGrads with the forward's dropout: dP's entries scaled by the mask
// first (dS = P (mask dP / (1-p) - delta)), P's after (what meets dO for dV
// is the dropped P). Block rows [r0, r1) of (batch, head) bh.
void DroppedScoreGrads(const AttentionDropout& dropout, int64_t bh, int64_t T, const float* lse,
                       const float* delta, float scale, int64_t r0, int64_t r1, float* s,
                       float* dp) {
  const int64_t n = r1;
  if (dropout.active()) {
    for (int64_t i = r0; i < r1; ++i) {
      DropRow(*DropOfRow<float>(dropout, bh, T, i), dp + (i - r0) * n, i + 1);
    }
  }
  ScoreGrads(lse, delta, scale, r0, r1, s, dp);
  if (dropout.active()) {
    for (int64_t i = r0; i < r1; ++i) {
      DropRow(*DropOfRow<float>(dropout, bh, T, i), s + (i - r0) * n, i + 1);
    }
  }
}

void AttentionBackwardHeadGemm(const HeadBackwardArgs& a, GemmScratch& w) {
  const QkvLayout& L = a.L;
  const int64_t T = L.T, D = L.D;
  w.Resize(T, D);
  const SeqSpans& sp = *a.rows;
  const int64_t S = 3 * sp.hc * D, Sy = sp.hc * D, at = a.hl * D;
  for (int64_t i = 0; i < T; ++i) {
    std::memcpy(&w.q[i * D], sp.qkv + i * S + at, D * sizeof(float));
    std::memcpy(&w.k[i * D], sp.qkv + i * S + Sy + at, D * sizeof(float));
    std::memcpy(&w.v[i * D], sp.qkv + i * S + 2 * Sy + at, D * sizeof(float));
    std::memcpy(&w.go[i * D], sp.dy + i * Sy + at, D * sizeof(float));
    w.delta[i] = Dot(&w.go[i * D], sp.y + i * Sy + at, D);  // dO_i . O_i
  }
  for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
    const int64_t r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0, n = r1;
    float *s = w.s.data(), *dp = w.dp.data();
    GemmF32(&w.q[r0 * D], w.k.data(), s, rows, n, D, false, true);
    GemmF32(&w.go[r0 * D], w.v.data(), dp, rows, n, D, false, true);
    DroppedScoreGrads(*a.dropout, a.b * L.H + a.h, T, a.lse + (a.b * L.H + a.h) * T, w.delta.data(),
                      a.scale, r0, r1, s, dp);
    GemmF32(dp, w.k.data(), &w.dq[r0 * D], rows, D, n, false, false);
    float* part = w.part.data();
    GemmF32(dp, &w.q[r0 * D], part, n, D, rows, true, false);
    AMPD_SIMD
    for (int64_t e = 0; e < n * D; ++e) w.dk[e] += part[e];
    GemmF32(s, &w.go[r0 * D], part, n, D, rows, true, false);
    AMPD_SIMD
    for (int64_t e = 0; e < n * D; ++e) w.dv[e] += part[e];
  }
  for (int64_t i = 0; i < T; ++i) {
    std::memcpy(sp.dx + i * S + at, &w.dq[i * D], D * sizeof(float));
    std::memcpy(sp.dx + i * S + Sy + at, &w.dk[i * D], D * sizeof(float));
    std::memcpy(sp.dx + i * S + 2 * Sy + at, &w.dv[i * D], D * sizeof(float));
  }
}

// The backward of bf16 attention where oneDNN has a bf16 matmul: the f32
// path's blocks with bf16 operands, as flash attention's backward on tensor
// cores (and the CUDA kernels) computes it: S = Q K^T and dP = dO V^T from
// the bf16 inputs (exact products, f32 sums); P and dS in f32, then rounded
// to bf16 before they meet K, Q and dO; every product summed in f32 and dQ,
// dK, dV rounded to bf16 once. No widened copies of the inputs, and the
// GEMMs run on AMX or AVX512-BF16. One (batch, head) a call.
struct Bf16Scratch {
  std::vector<uint16_t> q, k, v, go, p, ds;
  std::vector<float> delta, s, dp, dq, dk, dv, part, row_o, row_go;
  void Resize(int64_t T, int64_t D) {
    for (auto* m : {&q, &k, &v, &go}) m->resize(T * D);
    for (auto* m : {&dq, &part}) m->resize(T * D);
    row_o.resize(D);
    row_go.resize(D);
    delta.resize(T);
    const int64_t block = std::min(kRowBlock, T) * T;
    s.resize(block);
    dp.resize(block);
    p.resize(block);
    ds.resize(block);
    dk.assign(T * D, 0.0f);
    dv.assign(T * D, 0.0f);
  }
};

void AttentionBackwardHeadBf16(const uint16_t* qkv, const uint16_t* y, const uint16_t* dy,
                               const float* lse, const QkvLayout& L, int64_t b, int64_t h,
                               float scale, const AttentionDropout& dropout, uint16_t* dx,
                               Bf16Scratch& w) {
  const int64_t T = L.T, D = L.D;
  w.Resize(T, D);
  const size_t row_bytes = D * sizeof(uint16_t);
  for (int64_t i = 0; i < T; ++i) {
    std::memcpy(&w.q[i * D], qkv + L.Q(b, i, h), row_bytes);
    std::memcpy(&w.k[i * D], qkv + L.K(b, i, h), row_bytes);
    std::memcpy(&w.v[i * D], qkv + L.V(b, i, h), row_bytes);
    std::memcpy(&w.go[i * D], dy + L.Y(b, i, h), row_bytes);
    // dO_i . O_i from the widened rows, as the f32 path.
    core::ConvertBF16ToF32(dy + L.Y(b, i, h), w.row_go.data(), D);
    core::ConvertBF16ToF32(y + L.Y(b, i, h), w.row_o.data(), D);
    w.delta[i] = Dot(w.row_go.data(), w.row_o.data(), D);
  }
  const float* head_lse = lse + (b * L.H + h) * T;
  for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
    const int64_t r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0, n = r1;
    float *s = w.s.data(), *dp = w.dp.data();
    GemmBf16(&w.q[r0 * D], w.k.data(), s, rows, n, D, false, true);
    GemmBf16(&w.go[r0 * D], w.v.data(), dp, rows, n, D, false, true);
    DroppedScoreGrads(dropout, b * L.H + h, T, head_lse, w.delta.data(), scale, r0, r1, s, dp);
    core::ConvertF32ToBF16(s, w.p.data(), rows * n);
    core::ConvertF32ToBF16(dp, w.ds.data(), rows * n);
    GemmBf16(w.ds.data(), w.k.data(), &w.dq[r0 * D], rows, D, n, false, false);
    float* part = w.part.data();
    GemmBf16(w.ds.data(), &w.q[r0 * D], part, n, D, rows, true, false);
    AMPD_SIMD
    for (int64_t e = 0; e < n * D; ++e) w.dk[e] += part[e];
    GemmBf16(w.p.data(), &w.go[r0 * D], part, n, D, rows, true, false);
    AMPD_SIMD
    for (int64_t e = 0; e < n * D; ++e) w.dv[e] += part[e];
  }
  for (int64_t i = 0; i < T; ++i) {
    core::ConvertF32ToBF16(&w.dq[i * D], dx + L.Q(b, i, h), D);
    core::ConvertF32ToBF16(&w.dk[i * D], dx + L.K(b, i, h), D);
    core::ConvertF32ToBF16(&w.dv[i * D], dx + L.V(b, i, h), D);
  }
}

}  // namespace

AttentionResult CpuBackendImpl::CausalAttention(const Tensor& qkv, int64_t seq_len, int64_t n_head,
                                                const AttentionDropout& dropout) {
  return UsesDouble(qkv) ? CausalAttentionImpl<double>(qkv, seq_len, n_head, dropout)
                         : CausalAttentionImpl<float>(qkv, seq_len, n_head, dropout);
}

template <typename C>
AttentionResult CpuBackendImpl::CausalAttentionImpl(const Tensor& qkv, int64_t seq_len,
                                                    int64_t n_head,
                                                    const AttentionDropout& dropout) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C3 = qkv.dim(1);
  const QkvLayout L{T, C3 / 3, n_head, C3 / 3 / n_head};
  const C scale = C(1) / std::sqrt(C(L.D));
#ifdef AMPD_HAS_AVX512_KERNELS
  if constexpr (std::is_same_v<C, float>) {
    if (Avx512Head(L.D)) {
      // A task is one sequence's heads, all of them when there are enough
      // sequences to share out: its rows of qkv are then one contiguous
      // span, widened in one pass (or read in place when f32), and its
      // output rows one span, rounded into y in one pass. Reading each
      // head's rows where they lie (a row's 64 values every 3C) stalled on
      // the strided loads. Either way each row's arithmetic is the same.
      const RowAvx512Fn row = kRowAvx512[L.D / 16 - 1];
      const RowPairAvx512Fn pair =
          L.D / 16 <= kMaxPairChunks ? kRowPairAvx512[L.D / 16 - 1] : nullptr;
      const int64_t ld = PaddedKeys(T), D = L.D, H = n_head;
      const int64_t hc = B >= 2 * PoolThreads() ? H : 1;  // heads per task
      const int64_t S = 3 * hc * D;                       // a row's q, k, v in seq
      const Tensor y = Tensor::Uninitialized({B * T, L.C}, qkv.dtype());
      Output<float> lse({B, n_head, T}, DType::kF32);
      const bool in_place = qkv.dtype() == DType::kF32 && hc == H;
#pragma omp parallel
      {
        std::vector<float> seq(in_place ? 0 : T * S), ys(T * hc * D), q(T * D), kt(D * ld);
#pragma omp for schedule(dynamic)
        for (int64_t task = 0; task < B * (H / hc); ++task) {
          const int64_t b = task / (H / hc), h0 = task % (H / hc) * hc;
          const float* rows = seq.data();
          if (in_place) {
            rows = qkv.data<float>() + L.Q(b, 0, 0);
          } else {
            LoadSequenceQkv(qkv, L, b, h0, hc, seq.data());
          }
          for (int64_t hl = 0; hl < hc; ++hl) {
            const int64_t bh = b * H + h0 + hl;
            const float* qh = rows + hl * D;
            const float* kh = rows + hc * D + hl * D;
            const float* vh = rows + 2 * hc * D + hl * D;
            for (int64_t i = 0; i < T; ++i) std::memcpy(&q[i * D], qh + i * S, D * sizeof(float));
            TransposeHead(kh, S, T, D, ld, kt.data());
            float* out = ys.data() + hl * D;  // row i at out + i * hc * D
            for (int64_t i = 0; i < T;) {
              // Rows i and i + 1 together where they have the same key tiles.
              const auto drop = DropOfRow<float>(dropout, bh, T, i);
              const RowDrop<float>* dp = drop ? &*drop : nullptr;
              if (pair != nullptr && i + 1 < T && (i + 1) % kKeyTile != 0) {
                float two[2 * kMaxPairChunks * 16];
                pair(&q[i * D], kt.data(), ld, vh, S, i + 1, scale, two, &lse[bh * T + i], dp, T);
                std::memcpy(out + i * hc * D, two, D * sizeof(float));
                std::memcpy(out + (i + 1) * hc * D, two + D, D * sizeof(float));
                i += 2;
              } else {
                lse[bh * T + i] =
                    row(&q[i * D], kt.data(), ld, vh, S, i + 1, scale, out + i * hc * D, dp);
                i += 1;
              }
            }
          }
          if (hc == H) {
            StoreBlock(ys.data(), y, L.Y(b, 0, 0), T * L.C);
          } else {
            for (int64_t i = 0; i < T; ++i) StoreBlock(&ys[i * D], y, L.Y(b, i, h0), D);
          }
        }
      }
      return {y, lse.Finish()};
    }
  }
#endif
  Values<C> in(qkv);
  const C* x = in.data();
  Output<C> y({B * T, L.C}, qkv.dtype());
  Output<C> lse({B, n_head, T}, std::is_same_v<C, double> ? DType::kF64 : DType::kF32);
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    std::vector<C> s(kKeyTile);
    for (int64_t i = 0; i < T; ++i) {
      const C* keys = x + L.K(b, 0, h);
      const C* values = x + L.V(b, 0, h);
      const auto drop = DropOfRow<C>(dropout, bh, T, i);
      lse[bh * T + i] = AttendRow(x + L.Q(b, i, h), keys, values, 3 * L.C, i + 1, L.D, scale,
                                  s.data(), y.data() + L.Y(b, i, h), drop ? &*drop : nullptr);
    }
  }
  return {y.Finish(), lse.Finish()};
}

Tensor CpuBackendImpl::CausalAttentionBackward(const Tensor& qkv, const Tensor& y,
                                               const Tensor& lse, const Tensor& dy, int64_t seq_len,
                                               int64_t n_head, const AttentionDropout& dropout) {
  return UsesDouble(qkv)
             ? CausalAttentionBackwardImpl<double>(qkv, y, lse, dy, seq_len, n_head, dropout)
             : CausalAttentionBackwardImpl<float>(qkv, y, lse, dy, seq_len, n_head, dropout);
}

template <typename C>
Tensor CpuBackendImpl::CausalAttentionBackwardImpl(const Tensor& qkv, const Tensor& y,
                                                   const Tensor& lse, const Tensor& dy,
                                                   int64_t seq_len, int64_t n_head,
                                                   const AttentionDropout& dropout) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C3 = qkv.dim(1);
  const QkvLayout L{T, C3 / 3, n_head, C3 / 3 / n_head};
  const C scale = C(1) / std::sqrt(C(L.D));
  if constexpr (std::is_same_v<C, float>) {
    if (qkv.dtype() == DType::kBF16 && y.dtype() == DType::kBF16 && dy.dtype() == DType::kBF16 &&
        ProbeCpu().bf16_matmul) {
      const Values<float> lv(lse);
      const Tensor dx = Tensor::Uninitialized(qkv.shape(), qkv.dtype());
      const auto* x = static_cast<const uint16_t*>(qkv.raw());
      const auto* yb = static_cast<const uint16_t*>(y.raw());
      const auto* gb = static_cast<const uint16_t*>(dy.raw());
      auto* out = static_cast<uint16_t*>(dx.raw());
#pragma omp parallel
      {
        Bf16Scratch scratch;
#pragma omp for schedule(dynamic)
        for (int64_t bh = 0; bh < B * n_head; ++bh) {
          AttentionBackwardHeadBf16(x, yb, gb, lv.data(), L, bh / n_head, bh % n_head, scale,
                                    dropout, out, scratch);
        }
      }
      return dx;
    }
    // A task is one sequence's heads, all of them when there are enough
    // sequences to share out (as in the forward): its rows of qkv, y and dy
    // are contiguous spans, widened in one pass each (or read in place when
    // f32), and its rows of dx one span, rounded into dx in one pass.
    const int64_t H = n_head, D = L.D;
    const int64_t hc = B >= 2 * PoolThreads() ? H : 1;
    const int64_t S = 3 * hc * D, Sy = hc * D;
    const bool in_place = hc == H && qkv.dtype() == DType::kF32 && y.dtype() == DType::kF32 &&
                          dy.dtype() == DType::kF32;
    const Values<float> lv(lse);
    const Tensor dx = Tensor::Uninitialized(qkv.shape(), qkv.dtype());
#pragma omp parallel
    {
      GemmScratch scratch;
      const int64_t span = in_place ? 0 : T;
      std::vector<float> qkv_s(span * S), y_s(span * Sy), dy_s(span * Sy), dx_s(span * S);
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < B * (H / hc); ++task) {
        const int64_t b = task / (H / hc), h0 = task % (H / hc) * hc;
        SeqSpans rows{qkv_s.data(), y_s.data(), dy_s.data(), dx_s.data(), hc};
        if (in_place) {
          rows = {qkv.data<float>() + L.Q(b, 0, 0), y.data<float>() + L.Y(b, 0, 0),
                  dy.data<float>() + L.Y(b, 0, 0), dx.data<float>() + L.Q(b, 0, 0), hc};
        } else {
          LoadSequenceQkv(qkv, L, b, h0, hc, qkv_s.data());
          if (hc == H) {
            LoadRow(y, L.Y(b, 0, 0), T * Sy, y_s.data());
            LoadRow(dy, L.Y(b, 0, 0), T * Sy, dy_s.data());
          } else {
            for (int64_t i = 0; i < T; ++i) {
              LoadRow(y, L.Y(b, i, h0), Sy, &y_s[i * Sy]);
              LoadRow(dy, L.Y(b, i, h0), Sy, &dy_s[i * Sy]);
            }
          }
        }
        for (int64_t hl = 0; hl < hc; ++hl) {
          AttentionBackwardHeadGemm(
              HeadBackwardArgs{&rows, hl, lv.data(), L, b, h0 + hl, scale, &dropout}, scratch);
        }
        if (in_place) continue;
        if (hc == H) {
          StoreBlock(dx_s.data(), dx, L.Q(b, 0, 0), T * S);
        } else {
          for (int64_t i = 0; i < T; ++i) {
            StoreBlock(&dx_s[i * S], dx, L.Q(b, i, h0), D);
            StoreBlock(&dx_s[i * S + D], dx, L.K(b, i, h0), D);
            StoreBlock(&dx_s[i * S + 2 * D], dx, L.V(b, i, h0), D);
          }
        }
      }
    }
    return dx;
  }
  Values<C> in(qkv), yv(y), gv(dy), lv(lse);
  const C *x = in.data(), *o = yv.data(), *g = gv.data(), *ls = lv.data();
  Output<C> dx(qkv.shape(), qkv.dtype());
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
      const auto drop = DropOfRow<C>(dropout, bh, T, i);
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(scale * Dot(q, x + L.K(b, j, h), L.D) - row_lse);
        C dp = Dot(gi, x + L.V(b, j, h), L.D);
        if (drop) dp = drop->Apply(dp, j);  // the dropped P's gradient
        ds[j] = p[j] * (dp - delta) * scale;
        if (drop) p[j] = drop->Apply(p[j], j);  // what met V, for dV
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
              scale, y.data() + (b * n + i) * E + h * D, nullptr);
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
