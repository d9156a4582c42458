#ifndef AMPD_ENGINE_CUDA_KERNELS_KERNEL_UTIL_H_
#define AMPD_ENGINE_CUDA_KERNELS_KERNEL_UTIL_H_

// What the CUDA kernel files (engine/cuda/kernels/*.cu) share: typed loads
// and stores that widen to the compute type and round once, launch helpers,
// block reductions in a fixed order. Includes CUDA's headers: only the .cu
// files include it (and the CPU emulator, which compiles them as C++).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "engine/cuda/kernels.h"

namespace ampd::engine::cuda::kernel_util {

constexpr int kThreads = 256;
enum DT { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3, kU8 = 4 };

template <typename C>
__device__ __forceinline__ C Load(const void* p, int dt, int64_t i) {
  switch (dt) {
    case kF32:
      return static_cast<C>(static_cast<const float*>(p)[i]);
    case kF16:
      return static_cast<C>(__half2float(static_cast<const __half*>(p)[i]));
    case kBF16:
      return static_cast<C>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case kU8:  // raw bytes (codes): their integer value
      return static_cast<C>(static_cast<const uint8_t*>(p)[i]);
    default:
      return static_cast<C>(static_cast<const double*>(p)[i]);
  }
}

// Rounds once: f64 values bound for f16/bf16 go through f32, as on the CPU.
template <typename C>
__device__ __forceinline__ void Store(void* p, int dt, int64_t i, C v) {
  switch (dt) {
    case kF32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v));
      break;
    case kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    case kU8:  // raw bytes (codes): the value's integer part
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    default:
      static_cast<double*>(p)[i] = static_cast<double>(v);
  }
}

// ---- vector access: W consecutive elements (W = 4 or kVec) with aligned
// accesses of up to 16 bytes where the dtype allows (f32, f16, bf16; other
// dtypes, and W = 1, element by element). Each value converts exactly as
// Load/Store convert it, so a kernel gives the same bits whatever W it takes.
// For W > 1 the caller guarantees that i is a multiple of W and that the
// buffer starts on a 16-byte boundary: the launchers check Aligned16.
constexpr int kVec = 8;

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int N>
struct alignas(N) Bytes {
  unsigned int w[N / 4];
};

// A GPU faults on an access of n bytes at an address that is not a multiple
// of n (a sticky "misaligned address" that ends the context); the CPU
// emulator would not, so there it checks each vector access and aborts.
__device__ __forceinline__ void CheckAligned(const void* p, int n, const char* what) {
#ifdef AMPD_CUDA_EMU
  AmpdEmuCheckAligned(p, n, what);
#else
  (void)p, (void)n, (void)what;
#endif
}

// N bytes between aligned memory and registers, 16 (or N) at a time.
template <int N>
__device__ __forceinline__ void LoadBytes(void* to, const void* from) {
  constexpr int kChunk = N < 16 ? N : 16;
  CheckAligned(from, kChunk, "vector load");
#pragma unroll
  for (int o = 0; o < N; o += kChunk) {
    const Bytes<kChunk> q =
        *reinterpret_cast<const Bytes<kChunk>*>(static_cast<const char*>(from) + o);
    memcpy(static_cast<char*>(to) + o, &q, kChunk);
  }
}
template <int N>
__device__ __forceinline__ void StoreBytes(void* to, const void* from) {
  constexpr int kChunk = N < 16 ? N : 16;
  CheckAligned(to, kChunk, "vector store");
#pragma unroll
  for (int o = 0; o < N; o += kChunk) {
    Bytes<kChunk> q;
    memcpy(&q, static_cast<const char*>(from) + o, kChunk);
    *reinterpret_cast<Bytes<kChunk>*>(static_cast<char*>(to) + o) = q;
  }
}

template <int W, typename C>
__device__ __forceinline__ void LoadN(const void* p, int dt, int64_t i, C (&out)[W]) {
  if constexpr (W == 4 || W == kVec) {
    if (dt == kF32) {
      float f[W];
      LoadBytes<4 * W>(f, static_cast<const float*>(p) + i);
#pragma unroll
      for (int k = 0; k < W; ++k) out[k] = static_cast<C>(f[k]);
      return;
    }
    if (dt == kBF16) {
      __nv_bfloat16 h[W];
      LoadBytes<2 * W>(h, static_cast<const __nv_bfloat16*>(p) + i);
#pragma unroll
      for (int k = 0; k < W; ++k) out[k] = static_cast<C>(__bfloat162float(h[k]));
      return;
    }
    if (dt == kF16) {
      __half h[W];
      LoadBytes<2 * W>(h, static_cast<const __half*>(p) + i);
#pragma unroll
      for (int k = 0; k < W; ++k) out[k] = static_cast<C>(__half2float(h[k]));
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < W; ++k) out[k] = Load<C>(p, dt, i + k);
}

template <int W, typename C>
__device__ __forceinline__ void StoreN(void* p, int dt, int64_t i, const C (&v)[W]) {
  if constexpr (W == 4 || W == kVec) {
    if (dt == kF32) {
      float f[W];
#pragma unroll
      for (int k = 0; k < W; ++k) f[k] = static_cast<float>(v[k]);
      StoreBytes<4 * W>(static_cast<float*>(p) + i, f);
      return;
    }
    if (dt == kBF16) {
      __nv_bfloat16 h[W];
#pragma unroll
      for (int k = 0; k < W; ++k) h[k] = __float2bfloat16_rn(static_cast<float>(v[k]));
      StoreBytes<2 * W>(static_cast<__nv_bfloat16*>(p) + i, h);
      return;
    }
    if (dt == kF16) {
      __half h[W];
#pragma unroll
      for (int k = 0; k < W; ++k) h[k] = __float2half_rn(static_cast<float>(v[k]));
      StoreBytes<2 * W>(static_cast<__half*>(p) + i, h);
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < W; ++k) Store<C>(p, dt, i + k, v[k]);
}

// A group's width as a type, for generic lambdas: kWidth<decltype(width)>.
template <int W>
struct Width {
  static constexpr int value = W;
};
template <typename T>
constexpr int kWidth = std::decay_t<T>::value;

// Grid-stride over [0, n) in groups of W, this block the block-th of
// `blocks` sharing the range: body(Width<W>(), i) for each group starting at
// i, then, when W > 1, body(Width<1>(), i) for each of the n % W elements
// left.
template <int W, typename F>
__device__ __forceinline__ void ForEachGroupOfBlocks(int64_t n, int64_t block, int64_t blocks,
                                                     F&& body) {
  const int64_t groups = n / W;
  const int64_t first = block * blockDim.x + threadIdx.x, stride = blocks * blockDim.x;
  for (int64_t g = first; g < groups; g += stride) body(Width<W>(), g * W);
  if constexpr (W > 1) {
    for (int64_t t = first; t < n % W; t += stride) body(Width<1>(), groups * W + t);
  }
}

// The same over the whole grid.
template <int W, typename F>
__device__ __forceinline__ void ForEachGroup(int64_t n, F&& body) {
  ForEachGroupOfBlocks<W>(n, blockIdx.x, gridDim.x, body);
}

// Which blocks of a launch over a list of up to N tensors work on which
// tensor: tensor t takes blocks [first[t], first[t+1]), about in proportion
// to its size (BlocksBySize), so that an embedding of 38 M values is not left
// to the same few blocks as a bias, and a list of small tensors launches few
// blocks, not a full grid for each of them.
template <int N>
struct BlockMap {
  int first[N + 1];
};

// The block's tensor under map, and how many blocks share it (*blocks) with
// this one the *block-th of them.
template <int N>
__device__ int TensorOfBlock(const BlockMap<N>& map, int64_t* blocks, int64_t* block) {
  int t = 0;
  while (static_cast<int>(blockIdx.x) >= map.first[t + 1]) ++t;
  *blocks = map.first[t + 1] - map.first[t];
  *block = blockIdx.x - map.first[t];
  return t;
}

// At most kMaxReduceBlocks blocks for `count` tensors of numel[t] values: one
// a tensor, the rest shared out in proportion to size, none more than
// ReduceBlocks would give it alone (four values a thread at least).
template <int N>
BlockMap<N> BlocksBySize(const int64_t* numel, int count);

// The fixed-order butterfly sum and max over a warp's 32 lanes: every lane
// ends with the same bits (each step adds the same two values, in either
// order, on both lanes of a pair).
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, m);
  return v;
}

// engine::backend::DropoutHash, bit for bit: dropout's (and attention
// dropout's) mask on the device.
__host__ __device__ __forceinline__ uint64_t DropoutHash(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__host__ __device__ inline int ElementSize(int dt) {
  return dt == kF32 ? 4 : dt == kF64 ? 8 : dt == kU8 ? 1 : 2;
}

inline int Blocks(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)));
}

inline std::string Check(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return "";
  return std::string(kernel) + " launch: " + cudaGetErrorString(err);
}

inline cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }

// Kernel launches go through one macro so that the CPU emulator
// (tests/engine/cuda/emu) can run these files unchanged.
#ifdef AMPD_CUDA_EMU
#define LAUNCH(kernel, grid, block, stream, ...) \
  AMPD_EMU_LAUNCH(kernel, grid, block, stream)(__VA_ARGS__)
#else
#define LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif

#define GRID_STRIDE(i, n)                                                                \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// A fixed-order tree sum over the block's kThreads values (result in thread 0).
template <typename T>
__device__ T BlockSum(T v) {
  __shared__ T shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  T result = shared[0];
  __syncthreads();
  return result;
}

template <typename T>
__device__ T BlockMax(T v) {
  __shared__ T shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride)
      shared[threadIdx.x] = max(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  T result = shared[0];
  __syncthreads();
  return result;
}

inline bool AnyF64(int a, int b, int c = kF32) { return a == kF64 || b == kF64 || c == kF64; }

// The blocks a two-stage sum over n values uses (at most kMaxReduceBlocks).
inline int ReduceBlocks(int64_t n) {
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(kMaxReduceBlocks, (n + 4 * kThreads - 1) / (4 * kThreads))));
}
template <int N>
BlockMap<N> BlocksBySize(const int64_t* numel, int count) {
  int64_t total = 0;
  for (int t = 0; t < count; ++t) total += numel[t];
  const int64_t spare = kMaxReduceBlocks - count;
  BlockMap<N> map{};
  for (int t = 0; t < count; ++t) {
    const int64_t share = total > 0 ? 1 + numel[t] * spare / total : 1;
    map.first[t + 1] =
        map.first[t] + static_cast<int>(std::min<int64_t>(share, ReduceBlocks(numel[t])));
  }
  return map;
}

// The two stages (reductions.cu). Stage 1: each of `blocks` blocks sums a
// fixed grid-stride share of x (or of x², `squares`) in f64 into partial.
void LaunchPartialSums(const void* x, int xdt, int64_t n, bool squares, double* partial, int blocks,
                       Stream s);
// Stage 2: the partials in order; out = (carry + sum) * multiplier, carry (if
// given) updated to carry + sum.
void LaunchFinishSum(const double* partial, int count, double multiplier, double* carry, void* out,
                     int odt, Stream s);

// Sums over rows in two passes (kernels.h, ColumnSumScratch): a column-sum
// kernel takes grid ColumnGrid(rows, cols) (x: columns by kThreads, y: the
// chunk of ColumnChunkRows(rows) rows), writes partial[chunk * cols + c],
// and LaunchFinishColumnSums adds each column's partials in chunk order.
int64_t ColumnChunkRows(int64_t rows);
int64_t ColumnChunks(int64_t rows);  // 0 for no rows
dim3 ColumnGrid(int64_t rows, int64_t cols);
void LaunchFinishColumnSums(const double* partial, int64_t rows, int64_t cols, void* out, int odt,
                            Stream s);

}  // namespace ampd::engine::cuda::kernel_util

#endif  // AMPD_ENGINE_CUDA_KERNELS_KERNEL_UTIL_H_
