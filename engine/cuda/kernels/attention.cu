// Fused causal self-attention (backend/kernels/attention.h) on the GPU.
//
// f16 and bf16 with a head size that is a multiple of 16 up to 64 (GPT-2's 64
// included) take flash-attention kernels on tensor cores (WMMA tiles):
// FlashAttentionForwardKernel, and a backward of two kernels, one owning keys
// (dK, dV) and one owning queries (dQ). Everything else, f32 and f64
// included, takes the reference: one thread per query row with an online
// softmax in f32 (f64 for f64 input), and a backward of one thread per query
// for dQ and one per key for dK and dV. All store only each row's
// logsumexp, and every backward recomputes the probabilities from it.
//
// Every gradient element has one writer and a fixed summation order (no
// atomics): the same bits every run. The tensor-core kernels passed
// cuda_backend_test against the CPU on an H200 (2026-12-04, forward and
// backward, the backward bitwise repeatable); GPT-2 124M's attention takes
// 20 ms of a 57 ms step there (bench/README.md), about 10x flash
// attention's time: WMMA tiles go through shared memory, and the forward's
// softmax took two 5-step warp reductions per row and 32-key step. Since
// 2026-12-06 a lane owns a row's half instead (one shuffle per reduction):
// checked on the emulator, not yet run on a GPU. The emulator checks the
// kernels' indexing, barriers, shuffles and numerics in CI.

#include <mma.h>

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

struct Layout {
  int64_t T, C, H, D;
  __device__ int64_t Q(int64_t b, int64_t t, int64_t h) const {
    return (b * T + t) * 3 * C + h * D;
  }
  __device__ int64_t K(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + C; }
  __device__ int64_t V(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + 2 * C; }
  __device__ int64_t Y(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * C + h * D; }
};

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
    for (int64_t d = 0; d < L.D; ++d) {
      acc[d] = acc[d] * correction + p * Load<C>(qkv, dt, L.V(b, j, h) + d);
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

// dQ_i = scale * sum_{j <= i} p_ij (dO_i . V_j - delta_i) K_j
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
    const C dp = DotAt<C>(dy, dt, L.Y(b, i, h), qkv, dt, L.V(b, j, h), L.D);
    const C ds = Prob<C>(qkv, dt, L, lse, sdt, b, h, i, j, scale) * (dp - delta[bh * L.T + i]);
    for (int64_t d = 0; d < L.D; ++d) dq[d] += ds * scale * Load<C>(qkv, dt, L.K(b, j, h) + d);
  }
  for (int64_t d = 0; d < L.D; ++d) Store<C>(dqkv, dt, L.Q(b, i, h) + d, dq[d]);
}

// dK_j = scale * sum_{i >= j} ds_ij Q_i,  dV_j = sum_{i >= j} p_ij dO_i
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
    const C dp = DotAt<C>(dy, dt, L.Y(b, i, h), qkv, dt, L.V(b, j, h), L.D);
    const C ds = p * (dp - delta[bh * L.T + i]) * scale;
    for (int64_t d = 0; d < L.D; ++d) {
      dk[d] += ds * Load<C>(qkv, dt, L.Q(b, i, h) + d);
      dv[d] += p * Load<C>(dy, dt, L.Y(b, i, h) + d);
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

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

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
    if (first + r < rows) val = *reinterpret_cast<const Pack8*>(src + at(first + r) + v * 8);
    *reinterpret_cast<Pack8*>(&tile[r][v * 8]) = val;
  }
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
template <typename T>
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
    StageRows(k_tile, qkv, k0, kFlashKeys, D, L.T, [&](int64_t t) { return L.K(b, t, h); });
    StageRows(v_tile, qkv, k0, kFlashKeys, D, L.T, [&](int64_t t) { return L.V(b, t, h); });
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
      p_tile[warp][r][col(i)] = Cast<T>(p[i]);
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
template <typename T>
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
  StageRows(k_tile, qkv, j0, kFlashRows, D, L.T, [&](int64_t t) { return L.K(b, t, h); });
  StageRows(v_tile, qkv, j0, kFlashRows, D, L.T, [&](int64_t t) { return L.V(b, t, h); });
  Accumulators dk, dv;
#pragma unroll
  for (int n = 0; n < kFlashMaxD / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  float* s = &s_tile[warp][0][0];
  for (int64_t i0 = j0; i0 < L.T; i0 += kFlashKeys) {  // j0 is a multiple of 32
    __syncthreads();  // every warp is done with the previous queries
    StageRows(q_tile, qkv, i0, kFlashKeys, D, L.T, [&](int64_t t) { return L.Q(b, t, h); });
    StageRows(do_tile, dy, i0, kFlashKeys, D, L.T, [&](int64_t t) { return L.Y(b, t, h); });
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
      p_tile[warp][t][lane] = Cast<T>(p[t]);
    }
    __syncwarp();
    RowsTimesTileT(&v_tile[warp * 16][0], do_tile, kFlashKeys, D, s);  // dP^T
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      ds_tile[warp][t][lane] = Cast<T>(p[t] * (s_tile[warp][t][lane] - delta_of[lane]) * scale);
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
template <typename T>
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
  StageRows(q_tile, qkv, q0, kFlashRows, D, L.T, [&](int64_t t) { return L.Q(b, t, h); });
  StageRows(do_tile, dy, q0, kFlashRows, D, L.T, [&](int64_t t) { return L.Y(b, t, h); });
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
    StageRows(k_tile, qkv, k0, kFlashKeys, D, L.T, [&](int64_t t) { return L.K(b, t, h); });
    StageRows(v_tile, qkv, k0, kFlashKeys, D, L.T, [&](int64_t t) { return L.V(b, t, h); });
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
      ds_tile[warp][t][lane] = Cast<T>(p[t] * (s_tile[warp][t][lane] - delta_of[r]) * scale);
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

std::string LaunchFlashBackward(const void* qkv, const void* y, const void* dy, int dt,
                                const void* lse, int sdt, const Layout& L, int64_t B, void* delta,
                                void* dqkv, Stream s) {
  const dim3 rows_grid(static_cast<unsigned>((L.T + kThreads - 1) / kThreads),
                       static_cast<unsigned>(B * L.H));
  float* d = static_cast<float*>(delta);
  LAUNCH(AttentionDeltaKernel<float>, rows_grid, kThreads, S(s), y, dy, dt, L, d);
  const dim3 grid(static_cast<unsigned>((L.T + kFlashRows - 1) / kFlashRows),
                  static_cast<unsigned>(B * L.H));
  if (dt == kF16) {
    const auto* x = static_cast<const __half*>(qkv);
    const auto* g = static_cast<const __half*>(dy);
    auto* out = static_cast<__half*>(dqkv);
    LAUNCH(FlashAttentionBackwardKeyValueKernel<__half>, grid, kFlashThreads, S(s), x, g, L, lse,
           sdt, d, out);
    LAUNCH(FlashAttentionBackwardQueryKernel<__half>, grid, kFlashThreads, S(s), x, g, L, lse, sdt,
           d, out);
  } else {
    const auto* x = static_cast<const __nv_bfloat16*>(qkv);
    const auto* g = static_cast<const __nv_bfloat16*>(dy);
    auto* out = static_cast<__nv_bfloat16*>(dqkv);
    LAUNCH(FlashAttentionBackwardKeyValueKernel<__nv_bfloat16>, grid, kFlashThreads, S(s), x, g, L,
           lse, sdt, d, out);
    LAUNCH(FlashAttentionBackwardQueryKernel<__nv_bfloat16>, grid, kFlashThreads, S(s), x, g, L,
           lse, sdt, d, out);
  }
  return Check("FlashAttentionBackward");
}

std::string LaunchFlashForward(const void* qkv, int dt, const Layout& L, int64_t B, void* y,
                               void* lse, int sdt, Stream s) {
  const dim3 grid(static_cast<unsigned>((L.T + kFlashRows - 1) / kFlashRows),
                  static_cast<unsigned>(B * L.H));
  if (dt == kF16) {
    LAUNCH(FlashAttentionForwardKernel<__half>, grid, kFlashThreads, S(s),
           static_cast<const __half*>(qkv), L, static_cast<__half*>(y), lse, sdt);
  } else {
    LAUNCH(FlashAttentionForwardKernel<__nv_bfloat16>, grid, kFlashThreads, S(s),
           static_cast<const __nv_bfloat16*>(qkv), L, static_cast<__nv_bfloat16*>(y), lse, sdt);
  }
  return Check("FlashAttentionForwardKernel");
}
}  // namespace

std::string LaunchCausalAttention(const void* qkv, int dt, int64_t B, int64_t T, int64_t C,
                                  int64_t H, void* y, void* lse, int sdt, Stream s) {
  if (std::string e = CheckShape(C, H); !e.empty()) return e;
  if (B * T == 0) return "";
  const Layout L{T, C, H, C / H};
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
                                          int64_t H, void* delta, void* dqkv, Stream s) {
  if (std::string e = CheckShape(C, H); !e.empty()) return e;
  if (B * T == 0) return "";
  const Layout L{T, C, H, C / H};
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
