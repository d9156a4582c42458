// Row gather and its deterministic gradient (f64 accumulation in the order
// the rows come, no float atomics): the twins of engine/cpu/embedding.cc.

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

// grid (distinct ids): block u sums the dy rows of id ids[u] for every
// column, in the order those rows come (positions[offsets[u]..offsets[u+1]),
// ascending), in f64, and stores the table row once rounded. Rows no id
// names were zeroed before.
__global__ void EmbeddingBackwardKernel(const void* dy, int dt, const int32_t* groups,
                                        int64_t distinct, int64_t dim, void* dtable) {
  const int32_t* ids = groups;
  const int32_t* offsets = groups + distinct;
  const int32_t* positions = offsets + distinct + 1;
  const int64_t u = blockIdx.x;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    double acc = 0;
    for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) {
      acc += Load<double>(dy, dt, positions[k] * dim + c);
    }
    Store<double>(dtable, dt, ids[u] * dim + c, acc);
  }
}

}  // namespace

std::string LaunchEmbedding(const void* table, int dt, const int32_t* ids, int64_t n, int64_t dim,
                            void* y, Stream s) {
  if (n * dim == 0) return "";
  LAUNCH(EmbeddingKernel, Blocks(n * dim), kThreads, S(s), table, dt, ids, n, dim, y);
  return Check("EmbeddingKernel");
}

std::string LaunchEmbeddingBackward(const void* dy, int dt, const int32_t* groups,
                                    int64_t distinct, int64_t dim, int64_t rows, void* dtable,
                                    Stream s) {
  if (rows * dim == 0) return "";
  cudaError_t err = cudaMemsetAsync(dtable, 0, rows * dim * ElementSize(dt), S(s));
  if (err != cudaSuccess)
    return std::string("cudaMemsetAsync(embedding grad): ") + cudaGetErrorString(err);
  if (distinct == 0) return "";
  LAUNCH(EmbeddingBackwardKernel, static_cast<unsigned>(distinct), kThreads, S(s), dy, dt, groups,
         distinct, dim, dtable);
  return Check("EmbeddingBackwardKernel");
}

}  // namespace ampd::engine::cuda
