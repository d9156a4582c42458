// FP8 (backend/kernels/fp8.h): the scaled cast into E4M3/E5M2 with the amax it
// records, the decode back, and the once-per-step scaling update. The
// conversions are core/fp8.h's and the scale rule backend/fp8_scaling.h's,
// the very code the CPU runs, and every product is a single rounded multiply
// (__fmul_rn, never contracted), so the codes, amaxes and scales equal the
// CPU's bit for bit. The amax is a max, which does not depend on order; it
// is reduced in two fixed stages (per block into scratch, then one block)
// rather than with atomics.

#include "engine/core/fp8.h"
#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary
using core::Fp8Format;

__device__ __forceinline__ Fp8Format FormatOf(int f) {
  return f == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
}

// codes[i] = FP8(x[i] * scale); block_amax[blockIdx.x] = max |x| of the
// block's elements, block_clipped[blockIdx.x] = how many it clipped to +-max.
__global__ void Fp8CastKernel(const void* x, int dt, int64_t n, int format, const float* scales,
                              int64_t index, uint8_t* codes, float* block_amax,
                              unsigned* block_clipped) {
  const float scale = scales[index];
  const Fp8Format f = FormatOf(format);
  const float max = core::Fp8Max(f);
  float amax = 0.0f;
  unsigned clipped = 0;
  GRID_STRIDE(i, n) {
    const float v = Load<float>(x, dt, i);
    amax = fmaxf(amax, fabsf(v));
    const float scaled = __fmul_rn(v, scale);
    clipped += fabsf(scaled) > max ? 1u : 0u;  // not NaN
    codes[i] = core::F32ToFp8(scaled, f, /*saturate=*/true);
  }
  const float m = BlockMax(amax);
  const unsigned c = BlockSum(clipped);
  if (threadIdx.x == 0) {
    block_amax[blockIdx.x] = m;
    block_clipped[blockIdx.x] = c;
  }
}

// recorded = max(recorded, the blocks' maxima); *saturated (when not null)
// += the blocks' clipped counts.
__global__ void Fp8RecordAmaxKernel(const float* block_amax, const unsigned* block_clipped,
                                    int blocks, float* recorded, double* saturated) {
  float amax = 0.0f;
  double clipped = 0.0;
  for (int b = threadIdx.x; b < blocks; b += kThreads) {
    amax = fmaxf(amax, block_amax[b]);
    clipped += static_cast<double>(block_clipped[b]);
  }
  const float m = BlockMax(amax);
  const double c = BlockSum(clipped);
  if (threadIdx.x == 0) {
    *recorded = fmaxf(*recorded, m);
    if (saturated != nullptr) *saturated += c;
  }
}

__global__ void Fp8DecodeKernel(const uint8_t* codes, int64_t n, int format,
                                const float* scale_invs, int64_t index, void* y, int ydt) {
  const float scale_inv = scale_invs[index];
  const Fp8Format f = FormatOf(format);
  GRID_STRIDE(i, n) { Store<float>(y, ydt, i, __fmul_rn(core::Fp8ToF32(codes[i], f), scale_inv)); }
}

// One thread per FP8 tensor (column): core::Fp8UpdateScalingColumn, the host's rule.
__global__ void Fp8UpdateScalingKernel(float* history, int64_t len, int64_t n, float* scales,
                                       float* scale_invs, const float* scaled_max, int algo) {
  GRID_STRIDE(c, n) {
    core::Fp8UpdateScalingColumn(history + c, len, n, static_cast<core::AmaxAlgo>(algo),
                                 scaled_max[c], scales + c, scale_invs + c);
  }
}

}  // namespace

std::string LaunchFp8Cast(const void* x, int dt, int64_t n, int format, const float* scales,
                          int64_t index, float* recorded_amax, double* saturated, uint8_t* codes,
                          double* scratch, Stream s) {
  const int blocks = ReduceBlocks(n);
  // The scratch's kMaxReduceBlocks + 1 doubles: the blocks' amaxes (floats)
  // in its first half, their clipped counts (32-bit) in its second.
  float* block_amax = reinterpret_cast<float*>(scratch);
  unsigned* block_clipped = reinterpret_cast<unsigned*>(block_amax + kMaxReduceBlocks);
  LAUNCH(Fp8CastKernel, blocks, kThreads, S(s), x, dt, n, format, scales, index, codes, block_amax,
         block_clipped);
  LAUNCH(Fp8RecordAmaxKernel, 1, kThreads, S(s), block_amax, block_clipped, blocks, recorded_amax,
         saturated);
  return Check("Fp8CastKernel");
}

std::string LaunchFp8Decode(const uint8_t* codes, int64_t n, int format, const float* scale_invs,
                            int64_t index, void* y, int ydt, Stream s) {
  if (n == 0) return "";
  LAUNCH(Fp8DecodeKernel, Blocks(n), kThreads, S(s), codes, n, format, scale_invs, index, y, ydt);
  return Check("Fp8DecodeKernel");
}

std::string LaunchFp8UpdateScaling(float* history, int64_t len, int64_t n, float* scales,
                                   float* scale_invs, const float* scaled_max, int algo, Stream s) {
  if (n == 0) return "";
  LAUNCH(Fp8UpdateScalingKernel, Blocks(n), kThreads, S(s), history, len, n, scales, scale_invs,
         scaled_max, algo);
  return Check("Fp8UpdateScalingKernel");
}

namespace {

// grid (ceil(cols / 32), min(ceil(rows / 32), 65535)), block (32, 8): a
// tile in, through shared memory (33 wide: no bank conflicts on the way
// out), and out transposed; blocks walk down the rows past the grid's y.
__global__ void TransposeBytesKernel(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out) {
  __shared__ uint8_t tile[32][33];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.y) * 32) {
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = in[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;
      if (c < cols && r < rows) out[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();  // the tile is read before the next rows overwrite it
  }
}

}  // namespace

std::string LaunchTransposeBytes(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out,
                                 Stream s) {
  if (rows * cols == 0) return "";
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32),
                  static_cast<unsigned>(std::min<int64_t>((rows + 31) / 32, 65535)));
  LAUNCH(TransposeBytesKernel, grid, dim3(32, 8), S(s), in, rows, cols, out);
  return Check("TransposeBytesKernel");
}

}  // namespace ampd::engine::cuda
