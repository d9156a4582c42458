// Fused causal self-attention (backend/kernels/attention.h) on the GPU.
//
// f16 and bf16 with a head size that is a multiple of 16 up to 64 (GPT-2's 64
// included) take flash-attention kernels on tensor cores: a forward, and a
// backward of two kernels, one owning keys (dK, dV) and one owning queries
// (dQ). There are two sets (SetFlashKernels, kernels.h):
//  - mma.sync's (2026-12-06): flash attention 2's form, scores,
//    probabilities and accumulators in registers (the instruction's fragment
//    layout is documented: mma_sync.h), operands read from shared memory by
//    ldmatrix, the next step's tile staged by cp.async while the current one
//    is used (two buffers), the softmax in base 2 and the causal mask tested
//    only in steps that cross it (2026-12-07). Checked on the emulator
//    against the CPU; NOT yet run on a GPU, so not the default.
//  - WMMA's (the default): every per-element step through shared memory
//    (WMMA's fragment layout is unspecified). They passed cuda_backend_test
//    against the CPU on
//    an H200 (2026-12-04, the backward bitwise repeatable), where GPT-2
//    124M's attention took 20 ms of a 57 ms step, about 10x flash
//    attention's time (bench/README.md). Since 2026-12-06 the forward's
//    lane owns half a row (one shuffle per reduction): emulator-checked only.
// gpu_bench times both sets side by side at GPT-2's shape.
// Everything else, f32 and f64 included, takes the reference: one thread per
// query row with an online softmax in f32 (f64 for f64 input), and a
// backward of one thread per query for dQ and one per key for dK and dV. All
// store only each row's logsumexp, and every backward recomputes the
// probabilities from it.
//
// Dropout on the probabilities (backend::AttentionDropout) runs in every
// kernel: each probability's mask bit is a hash of (seed, its index), so the
// backward regenerates the forward's mask and nothing is stored; the
// tensor-core kernels take it as a template argument, so that without it
// they are unchanged (with it, ptxas spills up to 40 bytes at head size 64).
//
// Every gradient element has one writer and a fixed summation order (no
// atomics): the same bits every run. The emulator checks the kernels'
// indexing, barriers, shuffles, mma.sync fragments and numerics in CI.

#include <mma.h>

#include <cmath>
#include <cstdlib>

#include "engine/cuda/kernels/async_copy.h"
#include "engine/cuda/kernels/kernel_util.h"
#include "engine/cuda/kernels/mma_sync.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

struct Layout {
  int64_t T, C, H, D;
  // Attention dropout (backend::AttentionDropout): probability (bh, i, j) is
  // kept iff DropoutHash(seed, (bh T + i) T + j) >> 11 >= threshold, and
  // scaled by keep_scale; threshold 0 (p = 0) keeps every one unscaled.
  uint64_t drop_seed = 0, drop_threshold = 0;
  double keep_scale = 1;
  // x as the product with V sees it: x, or x dropped.
  template <typename C>
  __device__ __forceinline__ C Dropped(C x, int64_t bh, int64_t i, int64_t j) const {
    if (drop_threshold == 0) return x;
    const uint64_t index = static_cast<uint64_t>((bh * T + i) * T + j);
    return DropoutHash(drop_seed, index) >> 11 >= drop_threshold ? x * static_cast<C>(keep_scale)
                                                                 : C(0);
  }
  __device__ int64_t Q(int64_t b, int64_t t, int64_t h) const {
    return (b * T + t) * 3 * C + h * D;
  }
  __device__ int64_t K(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + C; }
  __device__ int64_t V(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + 2 * C; }
  __device__ int64_t Y(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * C + h * D; }
};

// The tensor-core kernels take the dropout as a template argument: without
// it they are the same code as before it existed (no registers spent on
// the mask); with it, each probability goes through Layout::Dropped.
template <bool kDropout, typename C>
__device__ __forceinline__ C MaybeDropped(const Layout& L, C x, int64_t bh, int64_t i, int64_t j) {
  if constexpr (kDropout) {
    return L.Dropped(x, bh, i, j);
  } else {
    return x;
  }
}

template <typename C>
__device__ C DotAt(const void* a, int adt, int64_t ai, const void* b, int bdt, int64_t bi,
                   int64_t n) {
  C s = 0;
  for (int64_t d = 0; d < n; ++d) s += Load<C>(a, adt, ai + d) * Load<C>(b, bdt, bi + d);
  return s;
}

// grid (ceil(T / kThreads), B * H): thread = query row i of head (b, h).
template <typename C>
__global__ void AttentionForwardKernel(const void* qkv, int dt, Layout L, void* y, void* lse,
                                       int sdt) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  if (i >= L.T) return;
  const C scale = C(1) / sqrt(C(L.D));
  C acc[kMaxAttentionHeadDim];
  for (int64_t d = 0; d < L.D; ++d) acc[d] = 0;
  C m = -INFINITY, l = 0;
  for (int64_t j = 0; j <= i; ++j) {
    const C s = scale * DotAt<C>(qkv, dt, L.Q(b, i, h), qkv, dt, L.K(b, j, h), L.D);
    const C m_new = s > m ? s : m;
    const C correction = exp(m - m_new), p = exp(s - m_new);
    l = l * correction + p;
    const C pv = L.Dropped(p, bh, i, j);
    for (int64_t d = 0; d < L.D; ++d) {
      acc[d] = acc[d] * correction + pv * Load<C>(qkv, dt, L.V(b, j, h) + d);
    }
    m = m_new;
  }
  for (int64_t d = 0; d < L.D; ++d) Store<C>(y, dt, L.Y(b, i, h) + d, acc[d] / l);
  Store<C>(lse, sdt, bh * L.T + i, m + log(l));
}

// delta[bh, i] = dO_i . O_i.
template <typename C>
__global__ void AttentionDeltaKernel(const void* y, const void* dy, int dt, Layout L, C* delta) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  if (i >= L.T) return;
  delta[bh * L.T + i] = DotAt<C>(dy, dt, L.Y(b, i, h), y, dt, L.Y(b, i, h), L.D);
}

template <typename C>
__device__ C Prob(const void* qkv, int dt, const Layout& L, const void* lse, int sdt, int64_t b,
                  int64_t h, int64_t i, int64_t j, C scale) {
  const C s = scale * DotAt<C>(qkv, dt, L.Q(b, i, h), qkv, dt, L.K(b, j, h), L.D);
  return exp(s - Load<C>(lse, sdt, (b * L.H + h) * L.T + i));
}

// dQ_i = scale * sum_{j <= i} p_ij (dO_i . V_j - delta_i) K_j, the product
// dO_i . V_j dropped as p_ij was.
template <typename C>
__global__ void AttentionBackwardQueryKernel(const void* qkv, const void* dy, int dt,
                                             const void* lse, int sdt, const C* delta, Layout L,
                                             void* dqkv) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  if (i >= L.T) return;
  const C scale = C(1) / sqrt(C(L.D));
  C dq[kMaxAttentionHeadDim];
  for (int64_t d = 0; d < L.D; ++d) dq[d] = 0;
  for (int64_t j = 0; j <= i; ++j) {
    const C dp = L.Dropped(DotAt<C>(dy, dt, L.Y(b, i, h), qkv, dt, L.V(b, j, h), L.D), bh, i, j);
    const C ds = Prob<C>(qkv, dt, L, lse, sdt, b, h, i, j, scale) * (dp - delta[bh * L.T + i]);
    for (int64_t d = 0; d < L.D; ++d) dq[d] += ds * scale * Load<C>(qkv, dt, L.K(b, j, h) + d);
  }
  for (int64_t d = 0; d < L.D; ++d) Store<C>(dqkv, dt, L.Q(b, i, h) + d, dq[d]);
}

// dK_j = scale * sum_{i >= j} ds_ij Q_i,  dV_j = sum_{i >= j} p_ij dO_i (p_ij
// and dO_i . V_j dropped as in the forward)
template <typename C>
__global__ void AttentionBackwardKeyValueKernel(const void* qkv, const void* dy, int dt,
                                                const void* lse, int sdt, const C* delta, Layout L,
                                                void* dqkv) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  if (j >= L.T) return;
  const C scale = C(1) / sqrt(C(L.D));
  C dk[kMaxAttentionHeadDim], dv[kMaxAttentionHeadDim];
  for (int64_t d = 0; d < L.D; ++d) dk[d] = dv[d] = 0;
  for (int64_t i = j; i < L.T; ++i) {
    const C p = Prob<C>(qkv, dt, L, lse, sdt, b, h, i, j, scale);
    const C dp = L.Dropped(DotAt<C>(dy, dt, L.Y(b, i, h), qkv, dt, L.V(b, j, h), L.D), bh, i, j);
    const C ds = p * (dp - delta[bh * L.T + i]) * scale;
    const C pv = L.Dropped(p, bh, i, j);
    for (int64_t d = 0; d < L.D; ++d) {
      dk[d] += ds * Load<C>(qkv, dt, L.Q(b, i, h) + d);
      dv[d] += pv * Load<C>(dy, dt, L.Y(b, i, h) + d);
    }
  }
  for (int64_t d = 0; d < L.D; ++d) {
    Store<C>(dqkv, dt, L.K(b, j, h) + d, dk[d]);
    Store<C>(dqkv, dt, L.V(b, j, h) + d, dv[d]);
  }
}

// The new rows' k and v (qkv [B*n, 3C]) into the caches [B, max_len, C] at
// rows [past, past + n): copies in the storage dtype.
template <typename C>
__global__ void CacheAppendKernel(const void* qkv, int dt, int64_t B, int64_t n, int64_t E,
                                  int64_t max_len, int64_t past, void* k_cache, void* v_cache) {
  GRID_STRIDE(x, B * n * E) {
    const int64_t e = x % E, row = x / E, b = row / n, i = row % n;
    const int64_t at = (b * max_len + past + i) * E + e;
    Store<C>(k_cache, dt, at, Load<C>(qkv, dt, row * 3 * E + E + e));
    Store<C>(v_cache, dt, at, Load<C>(qkv, dt, row * 3 * E + 2 * E + e));
  }
}

// grid (ceil(n / kThreads), B * H): thread = new query i of head (b, h), at
// position past + i, over the cached keys 0..past + i (the forward's loop).
template <typename C>
__global__ void CachedAttentionKernel(const void* qkv, int dt, int64_t n, int64_t E, int64_t H,
                                      int64_t max_len, int64_t past, const void* k_cache,
                                      const void* v_cache, void* y) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, D = E / H;
  if (i >= n) return;
  const C scale = C(1) / sqrt(C(D));
  C acc[kMaxAttentionHeadDim];
  for (int64_t d = 0; d < D; ++d) acc[d] = 0;
  C m = -INFINITY, l = 0;
  const int64_t q = (b * n + i) * 3 * E + h * D;
  for (int64_t j = 0; j <= past + i; ++j) {
    const int64_t kv = (b * max_len + j) * E + h * D;
    const C s = scale * DotAt<C>(qkv, dt, q, k_cache, dt, kv, D);
    const C m_new = s > m ? s : m;
    const C correction = exp(m - m_new), p = exp(s - m_new);
    l = l * correction + p;
    for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * correction + p * Load<C>(v_cache, dt, kv + d);
    m = m_new;
  }
  for (int64_t d = 0; d < D; ++d) Store<C>(y, dt, (b * n + i) * E + h * D + d, acc[d] / l);
}

std::string CheckShape(int64_t C, int64_t H) {
  if (H < 1 || C % H != 0) return "causal attention: n_head must divide the embedding width";
  if (C / H > kMaxAttentionHeadDim) {
    return "causal attention: head dim " + std::to_string(C / H) + " is over the kernel's " +
           std::to_string(kMaxAttentionHeadDim);
  }
  return "";
}

// The three backward kernels in the compute type C (delta: C scratch).
template <typename C>
void LaunchBackward(const void* qkv, const void* y, const void* dy, int dt, const void* lse,
                    int sdt, const Layout& L, dim3 grid, void* delta, void* dqkv, Stream s) {
  C* d = static_cast<C*>(delta);
  LAUNCH(AttentionDeltaKernel<C>, grid, kThreads, S(s), y, dy, dt, L, d);
  LAUNCH(AttentionBackwardQueryKernel<C>, grid, kThreads, S(s), qkv, dy, dt, lse, sdt, d, L, dqkv);
  LAUNCH(AttentionBackwardKeyValueKernel<C>, grid, kThreads, S(s), qkv, dy, dt, lse, sdt, d, L,
         dqkv);
}

// ---- Flash attention on tensor cores (f16 and bf16, head size a multiple of
// 16 up to 64), with WMMA 16x16x16 tiles and f32 accumulators.
//
// Forward. A block takes 64 query rows of one head, four warps of 16 rows
// each, and walks the keys up to its last row (causal) 32 at a time:
//   S = Q K^T on tensor cores into the warp's shared f32 tile;
//   lane l takes key l of each of the warp's 16 rows and the online softmax
//   runs in f32 (the row's maximum and sum by warp shuffles, the correction
//   of what came before, P = exp(S - max) rounded to the input dtype for the
//   next product, the row sum of the unrounded P as the reference kernel's);
//   O = O * correction + P V: P V on tensor cores, 32 columns at a time
//   through the same f32 tile, O itself in registers (lane l holds columns
//   l and l + 32 of the warp's 16 rows).
// The rows' output is O / sum; the logsumexp is stored for the backward. The
// T x T probabilities never exist: only a warp's 16 x 32 tile of them.
// The WMMA API leaves which tile elements a thread holds unspecified, so
// every per-element step goes through shared memory, never through fragments.
//
// Shared tiles have padded rows (kLd, kSLd, kPLd): with rows exactly 128
// bytes apart, the 8 rows a fragment load reads at once would all start on
// the same memory bank.
namespace wmma = nvcuda::wmma;

constexpr int kFlashRows = 64;                // query rows (or keys) per block
constexpr int kFlashKeys = 32;                // keys (or queries) per step
constexpr int kFlashMaxD = 64;                // largest head size on this path
constexpr int kFlashWarps = kFlashRows / 16;  // 16 rows each
constexpr int kFlashThreads = 32 * kFlashWarps;
constexpr int kLd = kFlashMaxD + 8;   // row stride of the Q, K, V and dO tiles
constexpr int kSLd = kFlashKeys + 4;  // of a warp's f32 tile
constexpr int kPLd = kFlashKeys + 8;  // of a warp's P and dS tiles

template <typename T>
__device__ __forceinline__ T Cast(float v);
template <>
__device__ __forceinline__ __half Cast<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 Cast<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Rows are staged 16 bytes (8 values) at a time: qkv's and dO's rows start on
// 16-byte boundaries when the buffers do (D and C are multiples of 16).
bool FlashApplies(int dt, int64_t D, const void* a, const void* b = nullptr) {
  return (dt == kF16 || dt == kBF16) && D % 16 == 0 && D <= kFlashMaxD && Aligned16(a) &&
         (b == nullptr || Aligned16(b));
}

struct alignas(16) Pack8 {
  unsigned int w[4];  // 8 values of a 16-bit dtype
};

// Stages rows [first, first + n) into a [n][kLd] tile, zeros past T; at(t) is
// the element index of row t's slice.
template <typename T, typename At>
__device__ void StageRows(T (*tile)[kLd], const T* src, int64_t first, int n, int D, int64_t rows,
                          At at) {
  const int per_row = D / 8;
  for (int e = threadIdx.x; e < n * per_row; e += blockDim.x) {
    const int r = e / per_row, v = e % per_row;
    Pack8 val{};  // all-zero bits: 0 in f16 and bf16
    if (first + r < rows) {
      const T* from = src + at(first + r) + v * 8;
      CheckAligned(from, 16, "row stage load");
      val = *reinterpret_cast<const Pack8*>(from);
    }
    CheckAligned(&tile[r][v * 8], 16, "row stage store");
    *reinterpret_cast<Pack8*>(&tile[r][v * 8]) = val;
  }
}

// Keys [first, first + n) of head (b, h) and their values into k_tile and
// v_tile (zeros past T).
template <typename T>
__device__ void StageKeysAndValues(T (*k_tile)[kLd], T (*v_tile)[kLd], const T* qkv, int64_t first,
                                   int n, int D, const Layout& L, int64_t b, int64_t h) {
  StageRows(k_tile, qkv, first, n, D, L.T, [&](int64_t t) { return L.K(b, t, h); });
  StageRows(v_tile, qkv, first, n, D, L.T, [&](int64_t t) { return L.V(b, t, h); });
}

// Queries [first, first + n) of head (b, h) and their output gradients dy
// into q_tile and do_tile (zeros past T).
template <typename T>
__device__ void StageQueriesAndGradients(T (*q_tile)[kLd], T (*do_tile)[kLd], const T* qkv,
                                         const T* dy, int64_t first, int n, int D, const Layout& L,
                                         int64_t b, int64_t h) {
  StageRows(q_tile, qkv, first, n, D, L.T, [&](int64_t t) { return L.Q(b, t, h); });
  StageRows(do_tile, dy, first, n, D, L.T, [&](int64_t t) { return L.Y(b, t, h); });
}

// The warp's 16 rows (row stride kLd) times the tile's first `cols` rows,
// transposed: out[16][cols] (row stride kSLd) = rows x tile^T, f32.
template <typename T>
__device__ void RowsTimesTileT(const T* rows, T (*tile)[kLd], int cols, int D, float* out) {
  for (int n = 0; n < cols / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;
      wmma::load_matrix_sync(a, rows + kk * 16, kLd);
      wmma::load_matrix_sync(bt, &tile[n * 16][kk * 16], kLd);
      wmma::mma_sync(acc, a, bt, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kSLd, wmma::mem_row_major);
  }
  __syncwarp();
}

// T: __half or __nv_bfloat16 (dt's storage type).
template <typename T, bool kDropout>
__global__ void FlashAttentionForwardKernel(const T* qkv, Layout L, T* y, void* lse, int sdt) {
  alignas(32) __shared__ T q_tile[kFlashRows][kLd];
  alignas(32) __shared__ T k_tile[kFlashKeys][kLd];
  alignas(32) __shared__ T v_tile[kFlashKeys][kLd];
  alignas(32) __shared__ float s_tile[kFlashWarps][16][kSLd];
  alignas(32) __shared__ T p_tile[kFlashWarps][16][kPLd];
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  const int D = static_cast<int>(L.D);
  // The last query rows (the most keys) first: the long blocks start early
  // and the short ones fill the tail of the grid.
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kFlashRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* s = &s_tile[warp][0][0];
  StageRows(q_tile, qkv, q0, kFlashRows, D, L.T, [&](int64_t t) { return L.Q(b, t, h); });
  // Lane l owns row r = l % 16 of its warp's 16 and, of each 32-wide tile,
  // the 16 columns from c0 = 16 (l / 16): the row's softmax state is in its
  // registers (its partner, lane l ^ 16, holds the same), each step's row max
  // and sum take one shuffle each, and its share of O is o[half][i]. A lane
  // walks its 16 columns starting at column r (col): with the f32 tiles' row
  // stride of 36 words, the 32 lanes then read 32 different banks.
  const int r = lane % 16, c0 = 16 * (lane / 16);
  auto col = [&](int i) { return c0 + (i + r) % 16; };
  const int64_t row = q0 + warp * 16 + r;
  float row_max = -INFINITY, row_sum = 0, o[2][16];
#pragma unroll
  for (int i = 0; i < 16; ++i) o[0][i] = o[1][i] = 0;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const int64_t key_end = min(L.T, q0 + kFlashRows);
  for (int64_t k0 = 0; k0 < key_end; k0 += kFlashKeys) {
    __syncthreads();  // every warp is done with the previous keys
    StageKeysAndValues(k_tile, v_tile, qkv, k0, kFlashKeys, D, L, b, h);
    __syncthreads();
    RowsTimesTileT(&q_tile[warp * 16][0], k_tile, kFlashKeys, D, s);  // S
    float p[16];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int64_t j = k0 + col(i);
      p[i] = j <= row && j < L.T ? s_tile[warp][r][col(i)] * scale : -INFINITY;
      m = fmaxf(m, p[i]);
    }
    m = fmaxf(row_max, fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16)));
    // A row with nothing visible yet keeps max -inf: no correction, P 0.
    const float correction = m == -INFINITY ? 1.0f : expf(row_max - m);
    float sum = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      p[i] = m == -INFINITY ? 0.0f : expf(p[i] - m);
      p_tile[warp][r][col(i)] = Cast<T>(MaybeDropped<kDropout>(L, p[i], bh, row, k0 + col(i)));
      sum += p[i];
    }
    // a + b == b + a: both lanes of the row get the same bits.
    row_sum = row_sum * correction + (sum + __shfl_xor_sync(0xFFFFFFFFu, sum, 16));
    row_max = m;
    __syncwarp();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (half * 32 >= D) break;
      for (int n = 0; n < 2; ++n) {
        if (half * 32 + n * 16 >= D) break;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bv;
          wmma::load_matrix_sync(a, &p_tile[warp][0][kk * 16], kPLd);
          wmma::load_matrix_sync(bv, &v_tile[kk * 16][half * 32 + n * 16], kLd);
          wmma::mma_sync(acc, a, bv, acc);
        }
        wmma::store_matrix_sync(s + n * 16, acc, kSLd, wmma::mem_row_major);
      }
      __syncwarp();
      // D is a multiple of 16: a lane's 16 columns are all in or all out.
      if (half * 32 + c0 < D) {
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          o[half][i] = o[half][i] * correction + s_tile[warp][r][col(i)];
        }
      }
      __syncwarp();
    }
  }
  if (row < L.T) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (half * 32 + c0 >= D) break;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        y[L.Y(b, row, h) + half * 32 + col(i)] = Cast<T>(o[half][i] / row_sum);
      }
    }
    if (c0 == 0) Store<float>(lse, sdt, bh * L.T + row, row_max + logf(row_sum));
  }
}

// ---- The same three kernels with mma.sync (mma_sync.h), flash attention 2's
// form: the products' fragments have a documented layout, so scores,
// probabilities and accumulators never leave registers. Tiles are staged in
// shared memory as above ([rows][kLd] of T); fragments are read from them
// with ldmatrix (LdMatrixX4), four 8 x 8 quarters a warp-wide instruction.
// Every row address it takes is 16-byte aligned: tile rows are kLd values
// (144 bytes) apart and the column offsets multiples of 8 values; and the
// padding puts the 8 rows of a quarter on distinct banks.

// The A fragment of the tile's rows [r0, r0 + 16), columns [c0, c0 + 16):
// quarter i at rows r0 + 8 (i % 2), columns c0 + 8 (i / 2).
template <typename T>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], const T (*tile)[kLd], int r0, int c0) {
  const int l = threadIdx.x % 32;
  LdMatrixX4<false>(a, &tile[r0 + l % 8 + 8 * (l / 8 % 2)][c0 + 8 * (l / 16)]);
}

// The B fragments of two adjacent 8-column tiles of the tile transposed,
// B[k][n] = tile[n0 + n][k0 + k] (a product with the tile's rows, as
// S = Q K^T takes K's): b[0..1] for columns n0.., b[2..3] for n0 + 8...
template <typename T>
__device__ __forceinline__ void LoadBTransposedPair(uint32_t (&b)[4], const T (*tile)[kLd], int n0,
                                                    int k0) {
  const int l = threadIdx.x % 32;
  LdMatrixX4<false>(b, &tile[n0 + l % 8 + 8 * (l / 16)][k0 + 8 * (l / 8 % 2)]);
}

// The B fragments of two adjacent 8-column tiles of the tile as it is,
// B[k][n] = tile[k0 + k][n0 + n] (as P V takes V): b[0..1] for columns n0..,
// b[2..3] for n0 + 8..; ldmatrix's transpose gathers each lane's two values
// down a column.
template <typename T>
__device__ __forceinline__ void LoadBPair(uint32_t (&b)[4], const T (*tile)[kLd], int k0, int n0) {
  const int l = threadIdx.x % 32;
  LdMatrixX4<true>(b, &tile[k0 + l % 8 + 8 * (l / 8 % 2)][n0 + 8 * (l / 16)]);
}

// d += a * (b[2 half], b[2 half + 1]): one of the two tiles a Load*Pair read.
template <typename T>
__device__ __forceinline__ void MmaHalf(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[4], int half) {
  const uint32_t bh[2] = {b[2 * half], b[2 * half + 1]};
  MmaM16N8K16<T>(d, a, bh);
}

// As StageRows, for a head size D known at compile time, with the copies in
// flight (CopyAsync16) until the thread's WaitAsyncCopies: the mma.sync
// kernels stage their next tile while they work on the current one. Rows
// past T are zeroed by plain stores.
template <int D, typename T, typename At>
__device__ void StageRowsAsync(T (*tile)[kLd], const T* src, int64_t first, int n, int64_t rows,
                               At at) {
  constexpr int kPerRow = D / 8;
  for (int e = threadIdx.x; e < n * kPerRow; e += blockDim.x) {
    const int r = e / kPerRow, v = e % kPerRow;
    if (first + r < rows) {
      CopyAsync16(&tile[r][v * 8], src + at(first + r) + v * 8);
    } else {
      CheckAligned(&tile[r][v * 8], 16, "row stage store");
      *reinterpret_cast<Pack8*>(&tile[r][v * 8]) = Pack8{};
    }
  }
}

// StageKeysAndValues with StageRowsAsync: keys [first, first + n) of head
// (b, h) and their values, in flight until the thread's wait.
template <int D, typename T>
__device__ void StageKeysAndValuesAsync(T (*k_tile)[kLd], T (*v_tile)[kLd], const T* qkv,
                                        int64_t first, int n, const Layout& L, int64_t b,
                                        int64_t h) {
  StageRowsAsync<D>(k_tile, qkv, first, n, L.T, [&](int64_t t) { return L.K(b, t, h); });
  StageRowsAsync<D>(v_tile, qkv, first, n, L.T, [&](int64_t t) { return L.V(b, t, h); });
}

// StageQueriesAndGradients with StageRowsAsync.
template <int D, typename T>
__device__ void StageQueriesAndGradientsAsync(T (*q_tile)[kLd], T (*do_tile)[kLd], const T* qkv,
                                              const T* dy, int64_t first, int n, const Layout& L,
                                              int64_t b, int64_t h) {
  StageRowsAsync<D>(q_tile, qkv, first, n, L.T, [&](int64_t t) { return L.Q(b, t, h); });
  StageRowsAsync<D>(do_tile, dy, first, n, L.T, [&](int64_t t) { return L.Y(b, t, h); });
}

// The mma.sync kernels' softmax runs in base 2: e^x = 2^(x log2(e)).
constexpr float kLog2E = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The top of a step of the mma.sync kernels' pipelined loops: once every
// warp is done with the previous step's tiles, stage() issues the next step's
// copies into them (StageRowsAsync); then this step's copies, issued a step
// earlier, are waited for by this thread and, past the barrier, by all.
template <typename F>
__device__ __forceinline__ void NextStep(F&& stage) {
  __syncthreads();
  stage();
  CommitAsyncCopies();
  WaitAsyncCopies<1>();
  __syncthreads();
}

// Two 16 x 8 f32 accumulators side by side (columns 0-7, 8-15), rounded to T,
// as the A fragment of a 16 x 16 operand: an accumulator's layout is the A
// operand's, so no value moves between lanes.
template <typename T>
__device__ __forceinline__ void PackA(uint32_t (&a)[4], const float (&left)[4],
                                      const float (&right)[4]) {
  a[0] = JoinPair(Cast<T>(left[0]), Cast<T>(left[1]));
  a[1] = JoinPair(Cast<T>(left[2]), Cast<T>(left[3]));
  a[2] = JoinPair(Cast<T>(right[0]), Cast<T>(right[1]));
  a[3] = JoinPair(Cast<T>(right[2]), Cast<T>(right[3]));
}

// Of the n_keys keys from k0, how many tiles of 8 a warp whose last query
// row is warp_last sees at all under the causal mask (the same in every lane;
// the tiles past it are skipped).
__device__ __forceinline__ int KeyTilesSeen(int n_keys, int64_t k0, int64_t warp_last) {
  return static_cast<int>(min(static_cast<int64_t>(n_keys / 8), (warp_last - k0) / 8 + 1));
}

// Rows r (0: g, 1: g + 8) of the 16 x D accumulators acc into dst's rows
// `row` at element offset at(row), rounded to T.
template <typename T, int D>
__device__ __forceinline__ void StoreRow(T* dst, int64_t at, const float (&acc)[D / 8][4], int r,
                                         float divisor) {
  const int q = threadIdx.x % 4;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    StorePair(dst + at + n * 8 + 2 * q,
              JoinPair(Cast<T>(acc[n][2 * r] / divisor), Cast<T>(acc[n][2 * r + 1] / divisor)));
  }
}

// Forward with mma.sync, flash attention 2's form: the products'
// fragments have a documented layout, so S, P and O never leave registers.
// A block takes 64 query rows of one head, four warps of 16 rows each, and
// walks the keys up to its last row 64 at a time (one K and V tile staged per
// step, two barriers a step). Per warp and step:
//   S = Q K^T: 8 tiles of 16 x 8 (Q's fragments loaded once, in registers);
//   the online softmax in f32 on S's registers, in base 2 as flash attention
//   does (scores times scale * log2(e), P = 2^(score - max): one exp2 a
//   value): lane (g, q) holds rows g and g + 8, columns 2q, 2q + 1 of each
//   tile, so a row's max is two shuffles among the four lanes of g; its
//   running sum stays per lane, summed across them once at the end;
//   the causal mask (and the end of the sequence) only where a step's keys
//   reach past the warp's first row or past T: the other steps skip the
//   per-value index tests;
//   P rounded to T: S's accumulator layout is the A operand's for the second
//   product, so P is packed where it lies;
//   O = O * correction + P V: D / 8 tiles of 16 x 8 in registers.
// Numerics as the WMMA kernel's up to the base-2 exponent's rounding: P
// rounded to T for the product, the row sums of the unrounded P, the
// (natural) logsumexp stored for the backward.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kFlashThreads, 4)
    FlashAttentionForwardMmaKernel(const T* qkv, Layout L, T* y, void* lse, int sdt) {
  constexpr int kKeys = 64;  // keys per step
  // Two K and V tiles: the next step's are staged while this one's are used.
  alignas(16) __shared__ T q_tile[kFlashRows][kLd];
  alignas(16) __shared__ T k_tiles[2][kKeys][kLd];
  alignas(16) __shared__ T v_tiles[2][kKeys][kLd];
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kFlashRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  auto stage_keys = [&](int64_t first, int buf) {
    StageKeysAndValuesAsync<D>(k_tiles[buf], v_tiles[buf], qkv, first, kKeys, L, b, h);
  };
  // The first group: Q and the first keys.
  StageRowsAsync<D>(q_tile, qkv, q0, kFlashRows, L.T, [&](int64_t t) { return L.Q(b, t, h); });
  stage_keys(0, 0);
  CommitAsyncCopies();
  uint32_t qf[D / 16][4];
  const int64_t warp_first = q0 + warp * 16;  // the warp's first row
  const int64_t rows[2] = {warp_first + g, warp_first + g + 8};
  const int64_t warp_last = warp_first + 15;  // the warp's last row
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0, 0}, o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
  // Scores in base-2 units: 2^(s * scale_log2) = e^(s * scale).
  const float scale_log2 = kLog2E / sqrtf(static_cast<float>(D));
  const int64_t key_end = min(L.T, q0 + kFlashRows);
  for (int64_t k0 = 0, buf = 0; k0 < key_end; k0 += kKeys, buf ^= 1) {
    NextStep([&] {
      if (k0 + kKeys < key_end) stage_keys(k0 + kKeys, buf ^ 1);
    });
    if (k0 == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) LoadA(qf[kk], q_tile, warp * 16, kk * 16);
    }
    const T(*k_tile)[kLd] = k_tiles[buf];
    const T(*v_tile)[kLd] = v_tiles[buf];
    const int tiles = KeyTilesSeen(kKeys, k0, warp_last);
    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; n += 2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = s[n + 1][i] = 0;
      if (n < tiles) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t kb[4];
          LoadBTransposedPair(kb, k_tile, n * 8, kk * 16);
          MmaHalf<T>(s[n], qf[kk], kb, 0);
          if (n + 1 < tiles) MmaHalf<T>(s[n + 1], qf[kk], kb, 1);
        }
      }
    }
    // Every key of the step is visible to every row of the warp (and is
    // before T): no per-value tests.
    const bool unmasked = k0 + kKeys - 1 <= warp_first && k0 + kKeys <= L.T;
    float m[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (unmasked) {
          s[n][i] *= scale_log2;
        } else {
          const int64_t j = k0 + n * 8 + 2 * q + (i & 1), row = rows[i / 2];
          s[n][i] = n < tiles && j <= row && j < L.T ? s[n][i] * scale_log2 : -INFINITY;
        }
        m[i / 2] = fmaxf(m[i / 2], s[n][i]);
      }
    }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[r] = fmaxf(m[r], __shfl_xor_sync(0xFFFFFFFFu, m[r], 1));
      m[r] = fmaxf(m[r], __shfl_xor_sync(0xFFFFFFFFu, m[r], 2));
      // A row with nothing visible yet keeps max -inf: no correction, P 0.
      correction[r] = m[r] == -INFINITY ? 1.0f : exp2f(row_max[r] - m[r]);
      row_max[r] = m[r];
      row_sum[r] *= correction[r];
    }
    // P in place, then rounded and packed as the A operand: 16 keys a
    // fragment.
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float mr = m[i / 2];
        s[n][i] = mr == -INFINITY ? 0.0f : exp2f(s[n][i] - mr);
        row_sum[i / 2] += s[n][i];
        s[n][i] = MaybeDropped<kDropout>(L, s[n][i], bh, rows[i / 2], k0 + n * 8 + 2 * q + (i & 1));
      }
    }
    uint32_t pf[kKeys / 16][4];
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) PackA<T>(pf[kk], s[2 * kk], s[2 * kk + 1]);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= correction[0];
      o[n][1] *= correction[0];
      o[n][2] *= correction[1];
      o[n][3] *= correction[1];
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      if (2 * kk >= tiles) break;  // P is 0 there
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t vb[4];
        LoadBPair(vb, v_tile, kk * 16, n * 8);
        MmaHalf<T>(o[n], pf[kk], vb, 0);
        MmaHalf<T>(o[n + 1], pf[kk], vb, 1);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // (a + b) + (c + d) in every lane of the four: the same bits in each.
    row_sum[r] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xFFFFFFFFu, row_sum[r], 2);
    if (rows[r] >= L.T) continue;
    StoreRow<T, D>(y, L.Y(b, rows[r], h), o, r, row_sum[r]);
    // Back to natural units: ln(sum 2^(t - max)) + max ln 2.
    if (q == 0) {
      Store<float>(lse, sdt, bh * L.T + rows[r], row_max[r] * kLn2 + logf(row_sum[r]));
    }
  }
}

// ---- The backward on tensor cores (the same dtypes and head sizes), flash
// attention 2's split without atomics: one kernel per gradient owner, so
// every element of dQ, dK and dV has one writer and a fixed order of sums.
// Both recompute P = exp(scale * Q K^T - lse) tile by tile from the forward's
// logsumexp, and dS = P * (dO V^T - delta) * scale, with delta = dO . O per
// query row (AttentionDeltaKernel). P and dS are rounded to the input dtype
// before they meet Q, K or dO on the tensor cores (as the forward's P is);
// accumulators are f32 fragments held in registers for the whole kernel.
//
// Per-element steps go through a warp's shared tile: lane l takes column l of
// the warp's 16 x 32 tile, all 16 rows, keeping its P values in registers
// between the two products (so only one f32 tile per warp is needed). The
// warps only share the block's staged rows, so __syncwarp guards the rest.

// acc (16 x 16) through the warp's f32 scratch (row stride kSLd) into dst
// rows [first, first + 16) at column offset col, rows < T only.
template <typename T, typename At>
__device__ void StoreFragment(const wmma::fragment<wmma::accumulator, 16, 16, 16, float>& acc,
                              float* scratch, T* dst, int64_t first, int col, int64_t rows, At at) {
  wmma::store_matrix_sync(scratch, acc, kSLd, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int e = lane; e < 16 * 16; e += 32) {
    const int r = e / 16, c = e % 16;
    if (first + r < rows) dst[at(first + r) + col + c] = Cast<T>(scratch[r * kSLd + c]);
  }
  __syncwarp();
}

using Accumulators = wmma::fragment<wmma::accumulator, 16, 16, 16, float>[kFlashMaxD / 16];

// acc[n] += (the warp's 16 x 32 tile at a, row stride kPLd) x (rows 0..31 of
// b, columns n*16..n*16+15), for each 16 columns n of the head size.
template <typename T>
__device__ __forceinline__ void AccumulateTileTimesRows(Accumulators& acc, const T* a, T (*b)[kLd],
                                                        int D) {
#pragma unroll
  for (int n = 0; n < kFlashMaxD / 16; ++n) {
    if (n < D / 16) {
      for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bf;
        wmma::load_matrix_sync(af, a + kk * 16, kPLd);
        wmma::load_matrix_sync(bf, &b[kk * 16][n * 16], kLd);
        wmma::mma_sync(acc[n], af, bf, acc[n]);
      }
    }
  }
}

// grid (ceil(T / 64), B * H): a block owns 64 keys of one head (16 per warp)
// and walks the queries that see them (i >= j), 32 at a time:
//   S^T = K Q^T, P^T from it; dP^T = V dO^T, dS^T from it;
//   dV += P^T dO;  dK += dS^T Q.
template <typename T, bool kDropout>
__global__ void FlashAttentionBackwardKeyValueKernel(const T* qkv, const T* dy, Layout L,
                                                     const void* lse, int sdt, const float* delta,
                                                     T* dqkv) {
  alignas(32) __shared__ T k_tile[kFlashRows][kLd];
  alignas(32) __shared__ T v_tile[kFlashRows][kLd];
  alignas(32) __shared__ T q_tile[kFlashKeys][kLd];
  alignas(32) __shared__ T do_tile[kFlashKeys][kLd];
  alignas(32) __shared__ float s_tile[kFlashWarps][16][kSLd];
  alignas(32) __shared__ T p_tile[kFlashWarps][16][kPLd];
  alignas(32) __shared__ T ds_tile[kFlashWarps][16][kPLd];
  __shared__ float lse_of[kFlashKeys], delta_of[kFlashKeys];
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  const int D = static_cast<int>(L.D);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kFlashRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  StageKeysAndValues(k_tile, v_tile, qkv, j0, kFlashRows, D, L, b, h);
  Accumulators dk, dv;
#pragma unroll
  for (int n = 0; n < kFlashMaxD / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  float* s = &s_tile[warp][0][0];
  for (int64_t i0 = j0; i0 < L.T; i0 += kFlashKeys) {  // j0 is a multiple of 32
    __syncthreads();  // every warp is done with the previous queries
    StageQueriesAndGradients(q_tile, do_tile, qkv, dy, i0, kFlashKeys, D, L, b, h);
    if (threadIdx.x < kFlashKeys) {
      const int64_t i = i0 + threadIdx.x;
      lse_of[threadIdx.x] = i < L.T ? Load<float>(lse, sdt, bh * L.T + i) : 0.0f;
      delta_of[threadIdx.x] = i < L.T ? delta[bh * L.T + i] : 0.0f;
    }
    __syncthreads();
    RowsTimesTileT(&k_tile[warp * 16][0], q_tile, kFlashKeys, D, s);  // S^T
    const int64_t i = i0 + lane;                                      // this lane's query
    float p[16];
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      const int64_t j = j0 + warp * 16 + t;
      const bool visible = i < L.T && j <= i;
      p[t] = visible ? expf(s_tile[warp][t][lane] * scale - lse_of[lane]) : 0.0f;
      p_tile[warp][t][lane] = Cast<T>(MaybeDropped<kDropout>(L, p[t], bh, i, j));
    }
    __syncwarp();
    RowsTimesTileT(&v_tile[warp * 16][0], do_tile, kFlashKeys, D, s);  // dP^T
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      const float dp = MaybeDropped<kDropout>(L, s_tile[warp][t][lane], bh, i, j0 + warp * 16 + t);
      ds_tile[warp][t][lane] = Cast<T>(p[t] * (dp - delta_of[lane]) * scale);
    }
    __syncwarp();
    AccumulateTileTimesRows(dv, &p_tile[warp][0][0], do_tile, D);  // dV += P^T dO
    AccumulateTileTimesRows(dk, &ds_tile[warp][0][0], q_tile, D);  // dK += dS^T Q
  }
  const int64_t first = j0 + warp * 16;
#pragma unroll
  for (int n = 0; n < kFlashMaxD / 16; ++n) {
    if (n < D / 16) {
      StoreFragment(dk[n], s, dqkv, first, n * 16, L.T, [&](int64_t t) { return L.K(b, t, h); });
      StoreFragment(dv[n], s, dqkv, first, n * 16, L.T, [&](int64_t t) { return L.V(b, t, h); });
    }
  }
}

// grid (ceil(T / 64), B * H): a block owns 64 queries of one head (16 per
// warp) and walks the keys they see (j <= i), 32 at a time:
//   S = Q K^T, P from it; dP = dO V^T, dS from it;  dQ += dS K.
template <typename T, bool kDropout>
__global__ void FlashAttentionBackwardQueryKernel(const T* qkv, const T* dy, Layout L,
                                                  const void* lse, int sdt, const float* delta,
                                                  T* dqkv) {
  alignas(32) __shared__ T q_tile[kFlashRows][kLd];
  alignas(32) __shared__ T do_tile[kFlashRows][kLd];
  alignas(32) __shared__ T k_tile[kFlashKeys][kLd];
  alignas(32) __shared__ T v_tile[kFlashKeys][kLd];
  alignas(32) __shared__ float s_tile[kFlashWarps][16][kSLd];
  alignas(32) __shared__ T ds_tile[kFlashWarps][16][kPLd];
  __shared__ float lse_of[kFlashRows], delta_of[kFlashRows];
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  const int D = static_cast<int>(L.D);
  // The last query rows (the most keys) first: the long blocks start early
  // and the short ones fill the tail of the grid.
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kFlashRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  StageQueriesAndGradients(q_tile, do_tile, qkv, dy, q0, kFlashRows, D, L, b, h);
  for (int r = threadIdx.x; r < kFlashRows; r += blockDim.x) {
    const int64_t i = q0 + r;
    lse_of[r] = i < L.T ? Load<float>(lse, sdt, bh * L.T + i) : 0.0f;
    delta_of[r] = i < L.T ? delta[bh * L.T + i] : 0.0f;
  }
  Accumulators dq;
#pragma unroll
  for (int n = 0; n < kFlashMaxD / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  float* s = &s_tile[warp][0][0];
  const int64_t key_end = min(L.T, q0 + kFlashRows);
  for (int64_t k0 = 0; k0 < key_end; k0 += kFlashKeys) {
    __syncthreads();  // every warp is done with the previous keys
    StageKeysAndValues(k_tile, v_tile, qkv, k0, kFlashKeys, D, L, b, h);
    __syncthreads();
    RowsTimesTileT(&q_tile[warp * 16][0], k_tile, kFlashKeys, D, s);  // S
    const int64_t j = k0 + lane;                                      // this lane's key
    float p[16];
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      const int r = warp * 16 + t;
      const bool visible = q0 + r < L.T && j <= q0 + r;
      p[t] = visible ? expf(s_tile[warp][t][lane] * scale - lse_of[r]) : 0.0f;
    }
    __syncwarp();
    RowsTimesTileT(&do_tile[warp * 16][0], v_tile, kFlashKeys, D, s);  // dP
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      const int r = warp * 16 + t;
      const float dp = MaybeDropped<kDropout>(L, s_tile[warp][t][lane], bh, q0 + r, j);
      ds_tile[warp][t][lane] = Cast<T>(p[t] * (dp - delta_of[r]) * scale);
    }
    __syncwarp();
    AccumulateTileTimesRows(dq, &ds_tile[warp][0][0], k_tile, D);  // dQ += dS K
  }
  const int64_t first = q0 + warp * 16;
#pragma unroll
  for (int n = 0; n < kFlashMaxD / 16; ++n) {
    if (n < D / 16) {
      StoreFragment(dq[n], s, dqkv, first, n * 16, L.T, [&](int64_t t) { return L.Q(b, t, h); });
    }
  }
}

// The backward with mma.sync: the WMMA kernels' split (one kernel owns keys,
// one queries, every gradient element one writer and one order of sums) and
// numerics (P and dS rounded to T before their products), with everything per
// element in registers. P is recomputed in base 2 as the forward computes it:
// 2^(s * scale log2(e) - lse log2(e)). The causal mask (and the end of the
// sequence) is tested per value only in steps that reach across it.
//
// grid (ceil(T / 64), B * H): a block owns 64 keys of one head (16 per warp,
// whose K and V fragments stay in registers) and walks the queries that see
// them, 32 at a time. Per warp and step, for its 16 keys by 32 queries:
//   S^T = K Q^T and dP^T = V dO^T (4 tiles of 16 x 8 each);
//   P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta) scale, in place;
//   dV += P^T dO and dK += dS^T Q (D / 8 tiles each, in registers).
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kFlashThreads, 3)
    FlashAttentionBackwardKeyValueMmaKernel(const T* qkv, const T* dy, Layout L, const void* lse,
                                            int sdt, const float* delta, T* dqkv) {
  constexpr int kQueries = kFlashKeys;  // queries a step
  // Two Q and dO tiles: the next step's are staged while this one's are used.
  alignas(16) __shared__ T k_tile[kFlashRows][kLd];
  alignas(16) __shared__ T v_tile[kFlashRows][kLd];
  alignas(16) __shared__ T q_tiles[2][kQueries][kLd];
  alignas(16) __shared__ T do_tiles[2][kQueries][kLd];
  __shared__ float lse2_of[kQueries], delta_of[kQueries];
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kFlashRows;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, q = threadIdx.x % 4;
  auto stage_queries = [&](int64_t first, int buf) {
    StageQueriesAndGradientsAsync<D>(q_tiles[buf], do_tiles[buf], qkv, dy, first, kQueries, L, b,
                                     h);
  };
  // Threads < kQueries fetch a step's logsumexp (times log2(e)) and delta one
  // step ahead, into registers, and store them for the step at its start.
  float next_lse2 = 0, next_delta = 0;
  auto fetch_row_terms = [&](int64_t first) {
    const int64_t i = first + threadIdx.x;
    if (threadIdx.x < kQueries && i < L.T) {
      next_lse2 = Load<float>(lse, sdt, bh * L.T + i) * kLog2E;
      next_delta = delta[bh * L.T + i];
    } else {
      next_lse2 = next_delta = 0;
    }
  };
  // The first group: K, V and the first queries.
  StageKeysAndValuesAsync<D>(k_tile, v_tile, qkv, j0, kFlashRows, L, b, h);
  stage_queries(j0, 0);
  CommitAsyncCopies();
  fetch_row_terms(j0);
  uint32_t kf[D / 16][4], vf[D / 16][4];
  const int64_t warp_first = j0 + warp * 16;  // the warp's first key
  const int64_t keys[2] = {warp_first + g, warp_first + g + 8};
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dk[n][i] = dv[n][i] = 0;
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const float scale_log2 = scale * kLog2E;
  for (int64_t i0 = j0, buf = 0; i0 < L.T; i0 += kQueries, buf ^= 1) {
    NextStep([&] {
      if (threadIdx.x < kQueries) {
        lse2_of[threadIdx.x] = next_lse2;
        delta_of[threadIdx.x] = next_delta;
      }
      if (i0 + kQueries < L.T) {
        stage_queries(i0 + kQueries, buf ^ 1);
        fetch_row_terms(i0 + kQueries);
      }
    });
    if (i0 == j0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        LoadA(kf[kk], k_tile, warp * 16, kk * 16);
        LoadA(vf[kk], v_tile, warp * 16, kk * 16);
      }
    }
    const T(*q_tile)[kLd] = q_tiles[buf];
    const T(*do_tile)[kLd] = do_tiles[buf];
    if (i0 + kQueries <= warp_first) continue;  // no query here sees the warp's keys
    // Leading query tiles of 8 that see none of them (the same in every lane).
    const int first = static_cast<int>(max(static_cast<int64_t>(0), (warp_first - i0) / 8));
    float p[kQueries / 8][4], ds[kQueries / 8][4];
#pragma unroll
    for (int n = 0; n < kQueries / 8; n += 2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) p[n][i] = ds[n][i] = p[n + 1][i] = ds[n + 1][i] = 0;
      if (n + 1 < first) continue;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t bq[4], bo[4];
        LoadBTransposedPair(bq, q_tile, n * 8, kk * 16);
        LoadBTransposedPair(bo, do_tile, n * 8, kk * 16);
        if (n >= first) {
          MmaHalf<T>(p[n], kf[kk], bq, 0);   // S^T
          MmaHalf<T>(ds[n], vf[kk], bo, 0);  // dP^T
        }
        MmaHalf<T>(p[n + 1], kf[kk], bq, 1);
        MmaHalf<T>(ds[n + 1], vf[kk], bo, 1);
      }
    }
    // Every query of the step sees every key of the warp, and is before T.
    const bool unmasked = i0 >= warp_first + 15 && i0 + kQueries <= L.T;
#pragma unroll
    for (int n = 0; n < kQueries / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = n * 8 + 2 * q + (i & 1);
        const int64_t query = i0 + c;
        const bool visible = unmasked || (n >= first && query >= keys[i / 2] && query < L.T);
        p[n][i] = visible ? exp2f(p[n][i] * scale_log2 - lse2_of[c]) : 0.0f;
        ds[n][i] = p[n][i] *
                   (MaybeDropped<kDropout>(L, ds[n][i], bh, query, keys[i / 2]) - delta_of[c]) *
                   scale;
        p[n][i] = MaybeDropped<kDropout>(L, p[n][i], bh, query, keys[i / 2]);  // what met V, for dV
      }
    }
#pragma unroll
    for (int kk = 0; kk < kQueries / 16; ++kk) {
      if (2 * kk + 1 < first) continue;  // P and dS are 0 there
      uint32_t pa[4], da[4];
      PackA<T>(pa, p[2 * kk], p[2 * kk + 1]);
      PackA<T>(da, ds[2 * kk], ds[2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t bo[4], bq[4];
        LoadBPair(bo, do_tile, kk * 16, n * 8);
        MmaHalf<T>(dv[n], pa, bo, 0);  // dV += P^T dO
        MmaHalf<T>(dv[n + 1], pa, bo, 1);
        LoadBPair(bq, q_tile, kk * 16, n * 8);
        MmaHalf<T>(dk[n], da, bq, 0);  // dK += dS^T Q
        MmaHalf<T>(dk[n + 1], da, bq, 1);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= L.T) continue;
    StoreRow<T, D>(dqkv, L.K(b, keys[r], h), dk, r, 1.0f);
    StoreRow<T, D>(dqkv, L.V(b, keys[r], h), dv, r, 1.0f);
  }
}

// grid (ceil(T / 64), B * H): a block owns 64 queries of one head (16 per
// warp, whose Q and dO fragments stay in registers) and walks the keys they
// see, 32 at a time, the last query rows first. Per warp and step:
//   S = Q K^T and dP = dO V^T; P and dS from them in place; dQ += dS K.
template <typename T, int D, bool kDropout>
__global__ void __launch_bounds__(kFlashThreads, 4)
    FlashAttentionBackwardQueryMmaKernel(const T* qkv, const T* dy, Layout L, const void* lse,
                                         int sdt, const float* delta, T* dqkv) {
  constexpr int kKeys = kFlashKeys;  // keys a step
  // Two K and V tiles: the next step's are staged while this one's are used.
  alignas(16) __shared__ T q_tile[kFlashRows][kLd];
  alignas(16) __shared__ T do_tile[kFlashRows][kLd];
  alignas(16) __shared__ T k_tiles[2][kKeys][kLd];
  alignas(16) __shared__ T v_tiles[2][kKeys][kLd];
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H;
  const int64_t q0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kFlashRows;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, q = threadIdx.x % 4;
  auto stage_keys = [&](int64_t first, int buf) {
    StageKeysAndValuesAsync<D>(k_tiles[buf], v_tiles[buf], qkv, first, kKeys, L, b, h);
  };
  // The first group: Q, dO and the first keys.
  StageQueriesAndGradientsAsync<D>(q_tile, do_tile, qkv, dy, q0, kFlashRows, L, b, h);
  stage_keys(0, 0);
  CommitAsyncCopies();
  uint32_t qf[D / 16][4], of[D / 16][4];
  const int64_t warp_first = q0 + warp * 16;
  const int64_t rows[2] = {warp_first + g, warp_first + g + 8};
  const int64_t warp_last = warp_first + 15;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const float scale_log2 = scale * kLog2E;
  float lse2_r[2], delta_r[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse2_r[r] = rows[r] < L.T ? Load<float>(lse, sdt, bh * L.T + rows[r]) * kLog2E : 0.0f;
    delta_r[r] = rows[r] < L.T ? delta[bh * L.T + rows[r]] : 0.0f;
  }
  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0;
  const int64_t key_end = min(L.T, q0 + kFlashRows);
  for (int64_t k0 = 0, buf = 0; k0 < key_end; k0 += kKeys, buf ^= 1) {
    NextStep([&] {
      if (k0 + kKeys < key_end) stage_keys(k0 + kKeys, buf ^ 1);
    });
    if (k0 == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        LoadA(qf[kk], q_tile, warp * 16, kk * 16);
        LoadA(of[kk], do_tile, warp * 16, kk * 16);
      }
    }
    const T(*k_tile)[kLd] = k_tiles[buf];
    const T(*v_tile)[kLd] = v_tiles[buf];
    if (k0 > warp_last) continue;  // no key here is seen by the warp's rows
    const int tiles = KeyTilesSeen(kKeys, k0, warp_last);
    float p[kKeys / 8][4], ds[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; n += 2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) p[n][i] = ds[n][i] = p[n + 1][i] = ds[n + 1][i] = 0;
      if (n >= tiles) continue;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t bk[4], bv[4];
        LoadBTransposedPair(bk, k_tile, n * 8, kk * 16);
        LoadBTransposedPair(bv, v_tile, n * 8, kk * 16);
        MmaHalf<T>(p[n], qf[kk], bk, 0);   // S
        MmaHalf<T>(ds[n], of[kk], bv, 0);  // dP
        if (n + 1 < tiles) {
          MmaHalf<T>(p[n + 1], qf[kk], bk, 1);
          MmaHalf<T>(ds[n + 1], of[kk], bv, 1);
        }
      }
    }
    // Every row of the warp sees every key of the step, and is before T.
    const bool unmasked = k0 + kKeys - 1 <= warp_first && warp_last < L.T;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t j = k0 + n * 8 + 2 * q + (i & 1), row = rows[i / 2];
        const bool visible = unmasked || (n < tiles && row < L.T && j <= row);
        p[n][i] = visible ? exp2f(p[n][i] * scale_log2 - lse2_r[i / 2]) : 0.0f;
        ds[n][i] =
            p[n][i] * (MaybeDropped<kDropout>(L, ds[n][i], bh, row, j) - delta_r[i / 2]) * scale;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      if (2 * kk >= tiles) break;  // dS is 0 there
      uint32_t da[4];
      PackA<T>(da, ds[2 * kk], ds[2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t bk[4];
        LoadBPair(bk, k_tile, kk * 16, n * 8);
        MmaHalf<T>(dq[n], da, bk, 0);  // dQ += dS K
        MmaHalf<T>(dq[n + 1], da, bk, 1);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] < L.T) StoreRow<T, D>(dqkv, L.Q(b, rows[r], h), dq, r, 1.0f);
  }
}

template <typename T, int D, bool kDropout>
void LaunchFlashBackwardMma(const T* qkv, const T* dy, const Layout& L, dim3 grid, const void* lse,
                            int sdt, const float* delta, T* dqkv, Stream s) {
  const auto key_value = FlashAttentionBackwardKeyValueMmaKernel<T, D, kDropout>;
  LAUNCH(key_value, grid, kFlashThreads, S(s), qkv, dy, L, lse, sdt, delta, dqkv);
  const auto query = FlashAttentionBackwardQueryMmaKernel<T, D, kDropout>;
  LAUNCH(query, grid, kFlashThreads, S(s), qkv, dy, L, lse, sdt, delta, dqkv);
}
template <typename T, int D>
void LaunchFlashBackwardMma(const T* qkv, const T* dy, const Layout& L, dim3 grid, const void* lse,
                            int sdt, const float* delta, T* dqkv, Stream s) {
  if (L.drop_threshold != 0) {
    LaunchFlashBackwardMma<T, D, true>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
  } else {
    LaunchFlashBackwardMma<T, D, false>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
  }
}

// D is 16, 32, 48 or 64 (FlashApplies).
template <typename T>
void LaunchFlashBackwardMma(const T* qkv, const T* dy, const Layout& L, dim3 grid, const void* lse,
                            int sdt, const float* delta, T* dqkv, Stream s) {
  switch (L.D) {
    case 16:
      return LaunchFlashBackwardMma<T, 16>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
    case 32:
      return LaunchFlashBackwardMma<T, 32>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
    case 48:
      return LaunchFlashBackwardMma<T, 48>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
    default:
      return LaunchFlashBackwardMma<T, 64>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
  }
}

FlashKernels InitialFlashKernels() {
  const char* v = std::getenv("AMPD_CUDA_FLASH_ATTENTION");
  return v != nullptr && std::string(v) == "mma" ? FlashKernels::kMma : FlashKernels::kWmma;
}
FlashKernels g_flash_kernels = InitialFlashKernels();

template <typename T, bool kDropout>
void LaunchFlashBackwardWmma(const T* qkv, const T* dy, const Layout& L, dim3 grid, const void* lse,
                             int sdt, const float* delta, T* dqkv, Stream s) {
  const auto key_value = FlashAttentionBackwardKeyValueKernel<T, kDropout>;
  LAUNCH(key_value, grid, kFlashThreads, S(s), qkv, dy, L, lse, sdt, delta, dqkv);
  const auto query = FlashAttentionBackwardQueryKernel<T, kDropout>;
  LAUNCH(query, grid, kFlashThreads, S(s), qkv, dy, L, lse, sdt, delta, dqkv);
}
template <typename T>
void LaunchFlashBackwardWmma(const T* qkv, const T* dy, const Layout& L, dim3 grid, const void* lse,
                             int sdt, const float* delta, T* dqkv, Stream s) {
  if (L.drop_threshold != 0) {
    LaunchFlashBackwardWmma<T, true>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
  } else {
    LaunchFlashBackwardWmma<T, false>(qkv, dy, L, grid, lse, sdt, delta, dqkv, s);
  }
}

std::string LaunchFlashBackward(const void* qkv, const void* y, const void* dy, int dt,
                                const void* lse, int sdt, const Layout& L, int64_t B, void* delta,
                                void* dqkv, Stream s) {
  const dim3 rows_grid(static_cast<unsigned>((L.T + kThreads - 1) / kThreads),
                       static_cast<unsigned>(B * L.H));
  float* d = static_cast<float*>(delta);
  LAUNCH(AttentionDeltaKernel<float>, rows_grid, kThreads, S(s), y, dy, dt, L, d);
  const dim3 grid(static_cast<unsigned>((L.T + kFlashRows - 1) / kFlashRows),
                  static_cast<unsigned>(B * L.H));
  if (g_flash_kernels == FlashKernels::kMma) {
    if (dt == kF16) {
      LaunchFlashBackwardMma(static_cast<const __half*>(qkv), static_cast<const __half*>(dy), L,
                             grid, lse, sdt, d, static_cast<__half*>(dqkv), s);
    } else {
      LaunchFlashBackwardMma(static_cast<const __nv_bfloat16*>(qkv),
                             static_cast<const __nv_bfloat16*>(dy), L, grid, lse, sdt, d,
                             static_cast<__nv_bfloat16*>(dqkv), s);
    }
    return Check("FlashAttentionBackwardMma");
  }
  if (dt == kF16) {
    LaunchFlashBackwardWmma(static_cast<const __half*>(qkv), static_cast<const __half*>(dy), L,
                            grid, lse, sdt, d, static_cast<__half*>(dqkv), s);
  } else {
    LaunchFlashBackwardWmma(static_cast<const __nv_bfloat16*>(qkv),
                            static_cast<const __nv_bfloat16*>(dy), L, grid, lse, sdt, d,
                            static_cast<__nv_bfloat16*>(dqkv), s);
  }
  return Check("FlashAttentionBackward");
}

template <typename T, int D>
void LaunchFlashForwardMma(const T* qkv, const Layout& L, dim3 grid, T* y, void* lse, int sdt,
                           Stream s) {
  const auto kernel = L.drop_threshold != 0 ? FlashAttentionForwardMmaKernel<T, D, true>
                                            : FlashAttentionForwardMmaKernel<T, D, false>;
  LAUNCH(kernel, grid, kFlashThreads, S(s), qkv, L, y, lse, sdt);
}

// D is 16, 32, 48 or 64 (FlashApplies).
template <typename T>
void LaunchFlashForwardMma(const T* qkv, const Layout& L, dim3 grid, T* y, void* lse, int sdt,
                           Stream s) {
  switch (L.D) {
    case 16:
      return LaunchFlashForwardMma<T, 16>(qkv, L, grid, y, lse, sdt, s);
    case 32:
      return LaunchFlashForwardMma<T, 32>(qkv, L, grid, y, lse, sdt, s);
    case 48:
      return LaunchFlashForwardMma<T, 48>(qkv, L, grid, y, lse, sdt, s);
    default:
      return LaunchFlashForwardMma<T, 64>(qkv, L, grid, y, lse, sdt, s);
  }
}

std::string LaunchFlashForward(const void* qkv, int dt, const Layout& L, int64_t B, void* y,
                               void* lse, int sdt, Stream s) {
  const dim3 grid(static_cast<unsigned>((L.T + kFlashRows - 1) / kFlashRows),
                  static_cast<unsigned>(B * L.H));
  if (g_flash_kernels == FlashKernels::kMma) {
    if (dt == kF16) {
      LaunchFlashForwardMma(static_cast<const __half*>(qkv), L, grid, static_cast<__half*>(y), lse,
                            sdt, s);
    } else {
      LaunchFlashForwardMma(static_cast<const __nv_bfloat16*>(qkv), L, grid,
                            static_cast<__nv_bfloat16*>(y), lse, sdt, s);
    }
    return Check("FlashAttentionForwardMmaKernel");
  }
  const bool drop = L.drop_threshold != 0;
  if (dt == kF16) {
    const auto kernel = drop ? FlashAttentionForwardKernel<__half, true>
                             : FlashAttentionForwardKernel<__half, false>;
    LAUNCH(kernel, grid, kFlashThreads, S(s), static_cast<const __half*>(qkv), L,
           static_cast<__half*>(y), lse, sdt);
  } else {
    const auto kernel = drop ? FlashAttentionForwardKernel<__nv_bfloat16, true>
                             : FlashAttentionForwardKernel<__nv_bfloat16, false>;
    LAUNCH(kernel, grid, kFlashThreads, S(s), static_cast<const __nv_bfloat16*>(qkv), L,
           static_cast<__nv_bfloat16*>(y), lse, sdt);
  }
  return Check("FlashAttentionForwardKernel");
}
}  // namespace

void SetFlashKernels(FlashKernels kernels) { g_flash_kernels = kernels; }
FlashKernels GetFlashKernels() { return g_flash_kernels; }

// The kernels' layout of the heads, with the dropout's mask
// (backend::AttentionDropout's Threshold and KeepScale).
Layout MakeLayout(int64_t T, int64_t C, int64_t H, double dropout_p, uint64_t dropout_seed) {
  Layout L{T, C, H, C / H};
  if (dropout_p > 0) {
    L.drop_seed = dropout_seed;
    L.drop_threshold = static_cast<uint64_t>(std::ceil(dropout_p * 0x1.0p53));
    L.keep_scale = 1.0 / (1.0 - dropout_p);
  }
  return L;
}

std::string LaunchCausalAttention(const void* qkv, int dt, int64_t B, int64_t T, int64_t C,
                                  int64_t H, double dropout_p, uint64_t dropout_seed, void* y,
                                  void* lse, int sdt, Stream s) {
  if (std::string e = CheckShape(C, H); !e.empty()) return e;
  if (B * T == 0) return "";
  const Layout L = MakeLayout(T, C, H, dropout_p, dropout_seed);
  if (FlashApplies(dt, L.D, qkv)) return LaunchFlashForward(qkv, dt, L, B, y, lse, sdt, s);
  const dim3 grid(static_cast<unsigned>((T + kThreads - 1) / kThreads),
                  static_cast<unsigned>(B * H));
  if (dt == kF64) {
    LAUNCH(AttentionForwardKernel<double>, grid, kThreads, S(s), qkv, dt, L, y, lse, sdt);
  } else {
    LAUNCH(AttentionForwardKernel<float>, grid, kThreads, S(s), qkv, dt, L, y, lse, sdt);
  }
  return Check("AttentionForwardKernel");
}

template <typename C>
void LaunchCached(const void* qkv, int dt, int64_t B, int64_t n, int64_t E, int64_t H,
                  int64_t max_len, int64_t past, void* k_cache, void* v_cache, void* y, Stream s) {
  LAUNCH(CacheAppendKernel<C>, Blocks(B * n * E), kThreads, S(s), qkv, dt, B, n, E, max_len, past,
         k_cache, v_cache);
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(B * H));
  LAUNCH(CachedAttentionKernel<C>, grid, kThreads, S(s), qkv, dt, n, E, H, max_len, past, k_cache,
         v_cache, y);
}

std::string LaunchCachedAttention(const void* qkv, int dt, int64_t B, int64_t n, int64_t E,
                                  int64_t H, int64_t max_len, int64_t past, void* k_cache,
                                  void* v_cache, void* y, Stream s) {
  if (std::string e = CheckShape(E, H); !e.empty()) return e;
  if (past + n > max_len) return "cached attention: past + new rows are over the cache's length";
  if (B * n == 0) return "";
  if (dt == kF64) {
    LaunchCached<double>(qkv, dt, B, n, E, H, max_len, past, k_cache, v_cache, y, s);
  } else {
    LaunchCached<float>(qkv, dt, B, n, E, H, max_len, past, k_cache, v_cache, y, s);
  }
  return Check("CachedAttentionKernel");
}

std::string LaunchCausalAttentionBackward(const void* qkv, const void* y, const void* dy, int dt,
                                          const void* lse, int sdt, int64_t B, int64_t T, int64_t C,
                                          int64_t H, double dropout_p, uint64_t dropout_seed,
                                          void* delta, void* dqkv, Stream s) {
  if (std::string e = CheckShape(C, H); !e.empty()) return e;
  if (B * T == 0) return "";
  const Layout L = MakeLayout(T, C, H, dropout_p, dropout_seed);
  if (FlashApplies(dt, L.D, qkv, dy)) {
    return LaunchFlashBackward(qkv, y, dy, dt, lse, sdt, L, B, delta, dqkv, s);
  }
  const dim3 grid(static_cast<unsigned>((T + kThreads - 1) / kThreads),
                  static_cast<unsigned>(B * H));
  if (dt == kF64) {
    LaunchBackward<double>(qkv, y, dy, dt, lse, sdt, L, grid, delta, dqkv, s);
  } else {
    LaunchBackward<float>(qkv, y, dy, dt, lse, sdt, L, grid, delta, dqkv, s);
  }
  return Check("AttentionBackward");
}

}  // namespace ampd::engine::cuda
