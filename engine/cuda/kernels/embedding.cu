// Row gather and its deterministic gradient (f64 accumulation in id order,
// no float atomics): the twins of engine/cpu/embedding.cc.

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

__global__ void EmbeddingKernel(const void* table, int dt, const int32_t* ids, int64_t n,
                                int64_t dim, void* y) {
  const int size = ElementSize(dt);
  GRID_STRIDE(i, n * dim) {
    const int64_t row = i / dim, c = i % dim;
    const char* src = static_cast<const char*>(table) + (ids[row] * dim + c) * size;
    char* dst = static_cast<char*>(y) + i * size;
    for (int b = 0; b < size; ++b) dst[b] = src[b];
  }
}

__global__ void EmbeddingBackwardKernel(const void* dy, int dt, const int32_t* ids, int64_t n,
                                        int64_t dim, double* acc) {
  // One thread per column: ids are visited in order, so sums are deterministic.
  GRID_STRIDE(c, dim) {
    for (int64_t i = 0; i < n; ++i) acc[ids[i] * dim + c] += Load<double>(dy, dt, i * dim + c);
  }
}

}  // namespace

std::string LaunchEmbedding(const void* table, int dt, const int32_t* ids, int64_t n, int64_t dim,
                            void* y, Stream s) {
  if (n * dim == 0) return "";
  LAUNCH(EmbeddingKernel, Blocks(n * dim), kThreads, S(s), table, dt, ids, n, dim, y);
  return Check("EmbeddingKernel");
}

std::string LaunchEmbeddingBackward(const void* dy, int dt, const int32_t* ids, int64_t n,
                                    int64_t dim, int64_t rows, double* acc, void* dtable,
                                    Stream s) {
  if (rows * dim == 0) return "";
  cudaError_t err = cudaMemsetAsync(acc, 0, rows * dim * sizeof(double), S(s));
  if (err != cudaSuccess)
    return std::string("cudaMemsetAsync(embedding grad): ") + cudaGetErrorString(err);
  LAUNCH(EmbeddingBackwardKernel, Blocks(dim), kThreads, S(s), dy, dt, ids, n, dim, acc);
  const std::string launched = Check("EmbeddingBackwardKernel");
  if (!launched.empty()) return launched;
  return LaunchConvert(acc, kF64, dtable, dt, rows * dim, s);  // rounded once into the table
}

}  // namespace ampd::engine::cuda
