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

// Fp8CastKernel's cast of x [rows, cols] by 32 x 32 tiles (a block of
// kThreads = 32 x 8 walks tiles with a stride of the grid): each code is
// stored in place and, through shared memory (33 wide: no bank conflicts on
// the way out), transposed into codes_t [cols, rows], both sides written in
// rows. The blocks' amaxes and clipped counts as Fp8CastKernel's.
__global__ void Fp8CastTransposeKernel(const void* x, int dt, int64_t rows, int64_t cols,
                                       int format, const float* scales, int64_t index,
                                       uint8_t* codes, uint8_t* codes_t, float* block_amax,
                                       unsigned* block_clipped) {
  __shared__ uint8_t tile[32][33];
  const float scale = scales[index];
  const Fp8Format f = FormatOf(format);
  const float max = core::Fp8Max(f);
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32, step = blockDim.x / 32;
  const int64_t tiles_c = (cols + 31) / 32, tiles = (rows + 31) / 32 * tiles_c;
  float amax = 0.0f;
  unsigned clipped = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t / tiles_c * 32, c0 = t % tiles_c * 32;
    for (int i = ty; i < 32; i += step) {
      const int64_t r = r0 + i, c = c0 + tx;
      if (r < rows && c < cols) {
        const float v = Load<float>(x, dt, r * cols + c);
        amax = fmaxf(amax, fabsf(v));
        const float scaled = __fmul_rn(v, scale);
        clipped += fabsf(scaled) > max ? 1u : 0u;  // not NaN
        const uint8_t code = core::F32ToFp8(scaled, f, /*saturate=*/true);
        codes[r * cols + c] = code;
        tile[i][tx] = code;
      }
    }
    __syncthreads();
    for (int i = ty; i < 32; i += step) {
      const int64_t c = c0 + i, r = r0 + tx;
      if (c < cols && r < rows) codes_t[c * rows + r] = tile[tx][i];
    }
    __syncthreads();  // the tile is read before the next one overwrites it
  }
  const float m = BlockMax(amax);
  const unsigned cl = BlockSum(clipped);
  if (threadIdx.x == 0) {
    block_amax[blockIdx.x] = m;
    block_clipped[blockIdx.x] = cl;
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

std::string LaunchFp8CastTranspose(const void* x, int dt, int64_t rows, int64_t cols, int format,
                                   const float* scales, int64_t index, float* recorded_amax,
                                   double* saturated, uint8_t* codes, uint8_t* codes_t,
                                   double* scratch, Stream s) {
  const int64_t tiles = (rows + 31) / 32 * ((cols + 31) / 32);
  const int blocks =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kMaxReduceBlocks, tiles)));
  float* block_amax = reinterpret_cast<float*>(scratch);  // as LaunchFp8Cast's
  unsigned* block_clipped = reinterpret_cast<unsigned*>(block_amax + kMaxReduceBlocks);
  LAUNCH(Fp8CastTransposeKernel, blocks, kThreads, S(s), x, dt, rows, cols, format, scales, index,
         codes, codes_t, block_amax, block_clipped);
  LAUNCH(Fp8RecordAmaxKernel, 1, kThreads, S(s), block_amax, block_clipped, blocks, recorded_amax,
         saturated);
  return Check("Fp8CastTransposeKernel");
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

}  // namespace ampd::engine::cuda
