// LayerNorm over the last dim and its gradient (rows, then columns for
// dgamma/dbeta in a fixed order): the twins of engine/cpu/layer_norm.cc.

#include <initializer_list>

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

// ---- one warp a row (cols <= 32 * 4 * kGroups, a multiple of 4, buffers
// Aligned16): lane l holds columns 4 (32 g + l) .. +3 of group g in registers,
// so x and dy are read once, and the sums are warp shuffles (the same bits on
// every lane) instead of block-wide trees with a barrier a level. GPT-2's
// rows of 768 took 8 barriers and two reads of x a row the other way.
constexpr int kRowsPerBlock = kThreads / 32;

// Group g of lane `lane` of row offset o (zeros past cols).
template <int kGroups>
__device__ __forceinline__ void LoadRow(const void* p, int dt, int64_t o, int64_t cols, int lane,
                                        float (&v)[kGroups][4]) {
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int64_t c = 4 * (32 * g + lane);
    if (c < cols) {
      LoadN(p, dt, o + c, v[g]);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) v[g][k] = 0.0f;
    }
  }
}

template <int kGroups>
__global__ void __launch_bounds__(kThreads)
    LayerNormWarpKernel(const void* x, int xdt, const void* gamma, int gdt, const void* beta,
                        int64_t rows, int64_t cols, float eps, void* y, int ydt, void* mean,
                        void* rstd, int sdt) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  if (r >= rows) return;  // the whole warp: no lane is left waiting at a shuffle
  const int64_t o = r * cols;
  float v[kGroups][4];
  LoadRow(x, xdt, o, cols, lane, v);
  float s = 0;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) s += (v[g][0] + v[g][1]) + (v[g][2] + v[g][3]);
  const float mu = WarpSum(s) / static_cast<float>(cols);
  float q = 0;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    if (4 * (32 * g + lane) < cols) {
#pragma unroll
      for (int k = 0; k < 4; ++k) q += (v[g][k] - mu) * (v[g][k] - mu);
    }
  }
  const float rs = 1.0f / sqrtf(WarpSum(q) / static_cast<float>(cols) + eps);
  if (lane == 0) {
    Store<float>(mean, sdt, r, mu);
    Store<float>(rstd, sdt, r, rs);
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int64_t c = 4 * (32 * g + lane);
    if (c < cols) {
      float w[4], b[4];
      LoadN(gamma, gdt, c, w);
      LoadN(beta, gdt, c, b);
#pragma unroll
      for (int k = 0; k < 4; ++k) v[g][k] = (v[g][k] - mu) * rs * w[k] + b[k];
      StoreN(y, ydt, o + c, v[g]);
    }
  }
}

template <int kGroups>
__global__ void __launch_bounds__(kThreads)
    LayerNormBackwardRowsWarpKernel(const void* x, int xdt, const void* gamma, int gdt,
                                    const void* mean, const void* rstd, int sdt, const void* dy,
                                    int dydt, int64_t rows, int64_t cols, void* dx) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  if (r >= rows) return;
  const int64_t o = r * cols;
  const float mu = Load<float>(mean, sdt, r), rs = Load<float>(rstd, sdt, r);
  float xhat[kGroups][4], g[kGroups][4];
  LoadRow(x, xdt, o, cols, lane, xhat);
  LoadRow(dy, dydt, o, cols, lane, g);
  float sg = 0, sgx = 0;
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    const int64_t c = 4 * (32 * j + lane);
    if (c < cols) {
      float w[4];
      LoadN(gamma, gdt, c, w);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        xhat[j][k] = (xhat[j][k] - mu) * rs;
        g[j][k] *= w[k];
        sg += g[j][k];
        sgx += g[j][k] * xhat[j][k];
      }
    }
  }
  sg = WarpSum(sg);
  sgx = WarpSum(sgx);
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    const int64_t c = 4 * (32 * j + lane);
    if (c < cols) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        g[j][k] = rs * (g[j][k] - (sg + xhat[j][k] * sgx) / static_cast<float>(cols));
      }
      StoreN(dx, xdt, o + c, g[j]);
    }
  }
}

// The groups of four a lane holds for rows of `cols`, or 0 where the warp
// kernels do not apply (f64, too wide, not a multiple of 4, a buffer not
// Aligned16).
int WarpGroups(int xdt, int64_t cols, std::initializer_list<const void*> buffers) {
  if (xdt == kF64 || cols % 4 != 0 || cols > 32 * 4 * 8) return 0;
  for (const void* p : buffers) {
    if (!Aligned16(p)) return 0;
  }
  const int64_t groups = (cols + 127) / 128;
  return groups <= 1 ? 1 : groups <= 2 ? 2 : groups <= 4 ? 4 : 8;
}

// launch(Width<groups>()) for the warp kernels' instantiations (1, 2, 4, 8);
// false, launching nothing, for any other value (0: they do not apply).
template <typename F>
bool WithWarpGroups(int groups, F&& launch) {
  switch (groups) {
    case 1:
      launch(Width<1>());
      return true;
    case 2:
      launch(Width<2>());
      return true;
    case 4:
      launch(Width<4>());
      return true;
    case 8:
      launch(Width<8>());
      return true;
    default:
      return false;
  }
}

int RowBlocks(int64_t rows) { return static_cast<int>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

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
  if (WithWarpGroups(WarpGroups(xdt, cols, {x, gamma, beta, y}), [&](auto groups) {
        LAUNCH(LayerNormWarpKernel<kWidth<decltype(groups)>>, RowBlocks(rows), kThreads, S(s), x,
               xdt, gamma, gdt, beta, rows, cols, static_cast<float>(eps), y, ydt, mean, rstd, sdt);
      })) {
    return Check("LayerNormWarpKernel");
  }
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
    const bool warp = WithWarpGroups(WarpGroups(xdt, cols, {x, gamma, dy, dx}), [&](auto groups) {
      LAUNCH(LayerNormBackwardRowsWarpKernel<kWidth<decltype(groups)>>, RowBlocks(rows), kThreads,
             S(s), x, xdt, gamma, gdt, mean, rstd, sdt, dy, dydt, rows, cols, dx);
    });
    if (!warp) {
      LAUNCH(LayerNormBackwardRowsKernel<float>, rows, kThreads, S(s), x, xdt, gamma, gdt, mean,
             rstd, sdt, dy, dydt, cols, dx);
    }
    LAUNCH(LayerNormBackwardColumnsKernel<float>, ColumnGrid(rows, cols), kThreads, S(s), x, xdt,
           mean, rstd, sdt, dy, dydt, rows, cols, ColumnChunkRows(rows), dgamma_partial,
           dbeta_partial);
  }
  LaunchFinishColumnSums(dgamma_partial, rows, cols, dgamma, gdt, s);
  LaunchFinishColumnSums(dbeta_partial, rows, cols, dbeta, gdt, s);
  return Check("LayerNormBackward");
}

}  // namespace ampd::engine::cuda
