// LayerNorm over the last dim and its gradient (rows, then columns for
// dgamma/dbeta in a fixed order): the twins of engine/cpu/layer_norm.cc.

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

template <typename C>
__global__ void LayerNormKernel(const void* x, int xdt, const void* gamma, int gdt,
                                const void* beta, int64_t cols, C eps, void* y, int ydt, void* mean,
                                void* rstd, int sdt) {
  const int64_t r = blockIdx.x, o = r * cols;
  C s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += Load<C>(x, xdt, o + c);
  const C mu = BlockSum(s) / C(cols);
  C v = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C d = Load<C>(x, xdt, o + c) - mu;
    v += d * d;
  }
  const C var = BlockSum(v) / C(cols);
  const C rs = C(1) / sqrt(var + eps);
  if (threadIdx.x == 0) {
    Store<C>(mean, sdt, r, mu);
    Store<C>(rstd, sdt, r, rs);
  }
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    Store<C>(y, ydt, o + c,
             (Load<C>(x, xdt, o + c) - mu) * rs * Load<C>(gamma, gdt, c) + Load<C>(beta, gdt, c));
  }
}

template <typename C>
__global__ void LayerNormBackwardRowsKernel(const void* x, int xdt, const void* gamma, int gdt,
                                            const void* mean, const void* rstd, int sdt,
                                            const void* dy, int dydt, int64_t cols, void* dx) {
  const int64_t r = blockIdx.x, o = r * cols;
  const C mu = Load<C>(mean, sdt, r), rs = Load<C>(rstd, sdt, r);
  C sg = 0, sgx = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C xhat = (Load<C>(x, xdt, o + c) - mu) * rs;
    const C g = Load<C>(dy, dydt, o + c) * Load<C>(gamma, gdt, c);
    sg += g;
    sgx += g * xhat;
  }
  sg = BlockSum(sg);
  sgx = BlockSum(sgx);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C xhat = (Load<C>(x, xdt, o + c) - mu) * rs;
    Store<C>(
        dx, xdt, o + c,
        rs * (Load<C>(dy, dydt, o + c) * Load<C>(gamma, gdt, c) - (sg + xhat * sgx) / C(cols)));
  }
}

// grid ColumnGrid(rows, cols): dgamma and dbeta's partial sums over one
// chunk of rows per column (the second pass adds them in chunk order).
template <typename C>
__global__ void LayerNormBackwardColumnsKernel(const void* x, int xdt, const void* mean,
                                               const void* rstd, int sdt, const void* dy, int dydt,
                                               int64_t rows, int64_t cols, int64_t chunk_rows,
                                               double* dgamma_partial, double* dbeta_partial) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
  double dg = 0, db = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const C xhat = (Load<C>(x, xdt, r * cols + c) - Load<C>(mean, sdt, r)) * Load<C>(rstd, sdt, r);
    const C g = Load<C>(dy, dydt, r * cols + c);
    dg += static_cast<double>(g * xhat);
    db += static_cast<double>(g);
  }
  dgamma_partial[blockIdx.y * cols + c] = dg;
  dbeta_partial[blockIdx.y * cols + c] = db;
}

}  // namespace

std::string LaunchLayerNorm(const void* x, int xdt, const void* gamma, int gdt, const void* beta,
                            int64_t rows, int64_t cols, double eps, void* y, int ydt, void* mean,
                            void* rstd, int sdt, Stream s) {
  if (rows == 0) return "";
  if (xdt == kF64) {
    LAUNCH(LayerNormKernel<double>, rows, kThreads, S(s), x, xdt, gamma, gdt, beta, cols, eps, y,
           ydt, mean, rstd, sdt);
  } else {
    LAUNCH(LayerNormKernel<float>, rows, kThreads, S(s), x, xdt, gamma, gdt, beta, cols,
           static_cast<float>(eps), y, ydt, mean, rstd, sdt);
  }
  return Check("LayerNormKernel");
}

std::string LaunchLayerNormBackward(const void* x, int xdt, const void* gamma, int gdt,
                                    const void* mean, const void* rstd, int sdt, const void* dy,
                                    int dydt, int64_t rows, int64_t cols, void* dx, void* dgamma,
                                    void* dbeta, double* scratch, Stream s) {
  if (rows == 0) return "";
  double* dgamma_partial = scratch;
  double* dbeta_partial = scratch + ColumnChunks(rows) * cols;
  if (xdt == kF64) {
    LAUNCH(LayerNormBackwardRowsKernel<double>, rows, kThreads, S(s), x, xdt, gamma, gdt, mean,
           rstd, sdt, dy, dydt, cols, dx);
    LAUNCH(LayerNormBackwardColumnsKernel<double>, ColumnGrid(rows, cols), kThreads, S(s), x, xdt,
           mean, rstd, sdt, dy, dydt, rows, cols, ColumnChunkRows(rows), dgamma_partial,
           dbeta_partial);
  } else {
    LAUNCH(LayerNormBackwardRowsKernel<float>, rows, kThreads, S(s), x, xdt, gamma, gdt, mean, rstd,
           sdt, dy, dydt, cols, dx);
    LAUNCH(LayerNormBackwardColumnsKernel<float>, ColumnGrid(rows, cols), kThreads, S(s), x, xdt,
           mean, rstd, sdt, dy, dydt, rows, cols, ColumnChunkRows(rows), dgamma_partial,
           dbeta_partial);
  }
  LaunchFinishColumnSums(dgamma_partial, rows, cols, dgamma, gdt, s);
  LaunchFinishColumnSums(dbeta_partial, rows, cols, dbeta, gdt, s);
  return Check("LayerNormBackward");
}

}  // namespace ampd::engine::cuda
