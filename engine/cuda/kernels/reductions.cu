// The reduction CUDA kernels: sums in f64 over a fixed grid, combined in a
// fixed order, so that results do not vary from run to run (the twins of
// engine/cpu/reductions.cc).

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

// Stage 1: each block sums a fixed grid-stride share of (mult * x) in f64.
__global__ void PartialSumKernel(const void* x, int xdt, int64_t n, bool squares, double* partial) {
  double acc = 0;
  GRID_STRIDE(i, n) {
    const double v = Load<double>(x, xdt, i);
    acc += squares ? v * v : v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Stage 2: the partials in order; out = (carry + sum) * multiplier.
__global__ void FinishSumKernel(const double* partial, int count, double multiplier, double* carry,
                                void* out, int odt) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = carry ? *carry : 0.0;
  for (int i = 0; i < count; ++i) s += partial[i];
  if (carry) *carry = s;
  Store<double>(out, odt, 0, s * multiplier);
}

__global__ void SumRowsKernel(const void* x, int xdt, int64_t rows, int64_t cols, void* out,
                              int odt) {
  GRID_STRIDE(c, cols) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += Load<double>(x, xdt, r * cols + c);
    Store<double>(out, odt, c, s);
  }
}

}  // namespace

void kernel_util::LaunchPartialSums(const void* x, int xdt, int64_t n, bool squares,
                                    double* partial, int blocks, Stream s) {
  LAUNCH(PartialSumKernel, blocks, kThreads, S(s), x, xdt, n, squares, partial);
}

void kernel_util::LaunchFinishSum(const double* partial, int count, double multiplier,
                                  double* carry, void* out, int odt, Stream s) {
  LAUNCH(FinishSumKernel, 1, 1, S(s), partial, count, multiplier, carry, out, odt);
}

std::string LaunchSumAll(const void* x, int xdt, int64_t n, double* scratch, void* out, int odt,
                         Stream s) {
  const int blocks = ReduceBlocks(n);
  LaunchPartialSums(x, xdt, n, false, scratch, blocks, s);
  LaunchFinishSum(scratch, blocks, 1.0, nullptr, out, odt, s);
  return Check("SumAll");
}

std::string LaunchSumRows(const void* x, int xdt, int64_t rows, int64_t cols, void* out, int odt,
                          Stream s) {
  if (cols == 0) return "";
  LAUNCH(SumRowsKernel, Blocks(cols), kThreads, S(s), x, xdt, rows, cols, out, odt);
  return Check("SumRowsKernel");
}

}  // namespace ampd::engine::cuda
