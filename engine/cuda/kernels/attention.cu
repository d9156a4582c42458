// Fused causal self-attention (backend/kernels/attention.h) on the GPU.
//
// Two forwards. f16 and bf16 with a head size that is a multiple of 16 up to
// 64 (GPT-2's 64 included) take the flash-attention kernel on tensor cores
// below (FlashAttentionForwardKernel). Everything else, f32 and f64 included,
// takes the reference: one thread per query row with an online softmax in f32
// (f64 for f64 input), the row's output accumulated in registers. Both store
// only each row's logsumexp.
//
// The backward recomputes each probability from the logsumexp: one thread per
// query for dQ and one per key for dK and dV, so every gradient element has
// one writer and a fixed summation order (no atomics, the same bits every
// run). It is plain FMAs still: a tensor-core backward is the next step for
// speed. Neither forward has run on a GPU yet (tools/gpu_bundle checks them
// against the CPU when one is lent); the emulator checks their indexing,
// barriers and numerics.

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

// ---- The forward on tensor cores (f16 and bf16, head size a multiple of 16
// up to 64): flash attention's tiling with WMMA 16x16x16 tiles.
//
// A block takes 64 query rows of one head, four warps of 16 rows each, and
// walks the keys up to its last row (causal) 32 at a time:
//   S = Q K^T on tensor cores (f32 accumulators) into the warp's shared tile;
//   one thread per row scales, masks and takes the online softmax in f32 (the
//   row's maximum, the correction of what came before, P = exp(S - max)
//   rounded to the input dtype for the next product, the row sum of the
//   unrounded P as the reference kernel's);
//   O = O * correction + P V on tensor cores, O kept in shared memory in f32.
// The rows' output is O / sum; the logsumexp is stored for the backward. The
// T x T probabilities never exist: only a warp's 16 x 32 tile of them.
// The WMMA API leaves which tile elements a thread holds unspecified, so
// every per-row step goes through shared memory, never through fragments.
namespace wmma = nvcuda::wmma;

constexpr int kFlashRows = 64;                // query rows per block
constexpr int kFlashKeys = 32;                // keys per step
constexpr int kFlashMaxD = 64;                // largest head size on this path
constexpr int kFlashWarps = kFlashRows / 16;  // 16 rows each
constexpr int kFlashThreads = 32 * kFlashWarps;

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

bool FlashForwardApplies(int dt, int64_t D) {
  return (dt == kF16 || dt == kBF16) && D % 16 == 0 && D <= kFlashMaxD;
}

// T: __half or __nv_bfloat16 (dt's storage type).
template <typename T>
__global__ void FlashAttentionForwardKernel(const T* qkv, Layout L, T* y, void* lse, int sdt) {
  alignas(32) __shared__ T q_tile[kFlashRows][kFlashMaxD];
  alignas(32) __shared__ T k_tile[kFlashKeys][kFlashMaxD];
  alignas(32) __shared__ T v_tile[kFlashKeys][kFlashMaxD];
  alignas(32) __shared__ float s_tile[kFlashWarps][16][kFlashKeys];
  alignas(32) __shared__ T p_tile[kFlashWarps][16][kFlashKeys];
  alignas(32) __shared__ float o_tile[kFlashWarps][16][kFlashMaxD];
  const int64_t bh = blockIdx.y, b = bh / L.H, h = bh % L.H, D = L.D;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kFlashRows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const T zero = Cast<T>(0.0f);
  for (int e = tid; e < kFlashRows * D; e += kFlashThreads) {
    const int64_t r = e / D, d = e % D;
    q_tile[r][d] = q0 + r < L.T ? qkv[L.Q(b, q0 + r, h) + d] : zero;
  }
  for (int e = lane; e < 16 * kFlashMaxD; e += 32) o_tile[warp][e / kFlashMaxD][e % kFlashMaxD] = 0;
  // Lanes 0..15 of a warp each own one of its rows' softmax state.
  const int64_t row = q0 + warp * 16 + lane;
  float row_max = -INFINITY, row_sum = 0;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const int64_t key_end = min(L.T, q0 + kFlashRows);
  for (int64_t k0 = 0; k0 < key_end; k0 += kFlashKeys) {
    __syncthreads();  // the previous step's tiles are consumed
    for (int e = tid; e < kFlashKeys * D; e += kFlashThreads) {
      const int64_t j = e / D, d = e % D;
      const bool in = k0 + j < L.T;
      k_tile[j][d] = in ? qkv[L.K(b, k0 + j, h) + d] : zero;
      v_tile[j][d] = in ? qkv[L.V(b, k0 + j, h) + d] : zero;
    }
    __syncthreads();
    for (int n = 0; n < kFlashKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;
        wmma::load_matrix_sync(a, &q_tile[warp * 16][kk * 16], kFlashMaxD);
        wmma::load_matrix_sync(bt, &k_tile[n * 16][kk * 16], kFlashMaxD);  // K^T
        wmma::mma_sync(acc, a, bt, acc);
      }
      wmma::store_matrix_sync(&s_tile[warp][0][n * 16], acc, kFlashKeys, wmma::mem_row_major);
    }
    __syncthreads();
    if (lane < 16) {
      float* s = s_tile[warp][lane];
      float m = row_max;
      for (int j = 0; j < kFlashKeys; ++j) {
        const bool visible = k0 + j <= row && k0 + j < L.T;
        s[j] = visible ? s[j] * scale : -INFINITY;
        m = fmaxf(m, s[j]);
      }
      // A row with nothing visible yet (a padding row past T) keeps
      // max -inf: no correction, and zeros for P.
      const float correction = m == -INFINITY ? 1.0f : expf(row_max - m);
      float sum = 0;
      for (int j = 0; j < kFlashKeys; ++j) {
        const float pj = m == -INFINITY ? 0.0f : expf(s[j] - m);
        sum += pj;
        p_tile[warp][lane][j] = Cast<T>(pj);
      }
      row_sum = row_sum * correction + sum;
      row_max = m;
      for (int64_t d = 0; d < D; ++d) o_tile[warp][lane][d] *= correction;
    }
    __syncthreads();
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, &o_tile[warp][0][n * 16], kFlashMaxD, wmma::mem_row_major);
      for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bv;
        wmma::load_matrix_sync(a, &p_tile[warp][0][kk * 16], kFlashKeys);
        wmma::load_matrix_sync(bv, &v_tile[kk * 16][n * 16], kFlashMaxD);
        wmma::mma_sync(acc, a, bv, acc);
      }
      wmma::store_matrix_sync(&o_tile[warp][0][n * 16], acc, kFlashMaxD, wmma::mem_row_major);
    }
  }
  __syncthreads();
  if (lane < 16 && row < L.T) {
    for (int64_t d = 0; d < D; ++d)
      y[L.Y(b, row, h) + d] = Cast<T>(o_tile[warp][lane][d] / row_sum);
    Store<float>(lse, sdt, bh * L.T + row, row_max + logf(row_sum));
  }
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
  if (FlashForwardApplies(dt, L.D)) return LaunchFlashForward(qkv, dt, L, B, y, lse, sdt, s);
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
