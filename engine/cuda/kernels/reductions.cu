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

// grid (ceil(cols / kThreads), chunks): thread = column c over the rows of
// chunk blockIdx.y; consecutive threads read consecutive columns.
__global__ void SumRowsPartialKernel(const void* x, int xdt, int64_t rows, int64_t cols,
                                     int64_t chunk_rows, double* partial) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
  double s = 0;
  for (int64_t r = r0; r < r1; ++r) s += Load<double>(x, xdt, r * cols + c);
  partial[blockIdx.y * cols + c] = s;
}

__global__ void FinishColumnSumsKernel(const double* partial, int64_t chunks, int64_t cols,
                                       void* out, int odt) {
  GRID_STRIDE(c, cols) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
    Store<double>(out, odt, c, s);  // no rows: zeros
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

// Chunks of 64 rows (fewer, longer ones past 65535 chunks: the grid's y limit).
int64_t kernel_util::ColumnChunkRows(int64_t rows) {
  return std::max<int64_t>(64, (rows + 65534) / 65535);
}
int64_t kernel_util::ColumnChunks(int64_t rows) {
  return (rows + ColumnChunkRows(rows) - 1) / ColumnChunkRows(rows);
}
dim3 kernel_util::ColumnGrid(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
              static_cast<unsigned>(ColumnChunks(rows)));
}
void kernel_util::LaunchFinishColumnSums(const double* partial, int64_t rows, int64_t cols,
                                         void* out, int odt, Stream s) {
  LAUNCH(FinishColumnSumsKernel, Blocks(cols), kThreads, S(s), partial, ColumnChunks(rows), cols,
         out, odt);
}

int64_t ColumnSumScratch(int64_t rows, int64_t cols) { return ColumnChunks(rows) * cols; }

std::string LaunchSumRows(const void* x, int xdt, int64_t rows, int64_t cols, double* scratch,
                          void* out, int odt, Stream s) {
  if (cols == 0) return "";
  if (rows > 0) {
    LAUNCH(SumRowsPartialKernel, ColumnGrid(rows, cols), kThreads, S(s), x, xdt, rows, cols,
           ColumnChunkRows(rows), scratch);
  }
  LaunchFinishColumnSums(scratch, rows, cols, out, odt, s);
  return Check("SumRows");
}

}  // namespace ampd::engine::cuda
