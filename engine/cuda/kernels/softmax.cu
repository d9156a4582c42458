// Row kernels, one block per row: (log-)softmax and its gradient, and the
// fused softmax cross-entropy (the twins of engine/cpu/softmax.cc).

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

// ---- row kernels: one block per row

template <typename C>
__global__ void SoftmaxKernel(const void* x, int xdt, int64_t cols, bool log, void* y, int ydt) {
  const int64_t o = blockIdx.x * cols;
  C mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = max(mx, Load<C>(x, xdt, o + c));
  mx = BlockMax(mx);
  C sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += exp(Load<C>(x, xdt, o + c) - mx);
  sum = BlockSum(sum);
  const C lse = mx + ::log(sum);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C v = Load<C>(x, xdt, o + c) - lse;
    Store<C>(y, ydt, o + c, log ? v : exp(v));
  }
}

template <typename C>
__global__ void SoftmaxBackwardKernel(const void* y, int ydt, const void* dy, int gdt, int64_t cols,
                                      bool log, void* dx, int odt) {
  const int64_t o = blockIdx.x * cols;
  C dot = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C g = Load<C>(dy, gdt, o + c);
    dot += log ? g : g * Load<C>(y, ydt, o + c);
  }
  dot = BlockSum(dot);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C g = Load<C>(dy, gdt, o + c), yv = Load<C>(y, ydt, o + c);
    Store<C>(dx, odt, o + c, log ? g - exp(yv) * dot : yv * (g - dot));
  }
}

// The cross-entropy of f64 logits (two reads of a row, in f64); the other
// dtypes take CrossEntropyRowsOnePassKernel below.
template <typename C>
__global__ void SoftmaxCrossEntropyRowsKernel(const void* logits, int dt, const int32_t* labels,
                                              int64_t cols, void* lse, int ldt, double* row_loss) {
  const int64_t r = blockIdx.x, o = r * cols;
  C mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = max(mx, Load<C>(logits, dt, o + c));
  mx = BlockMax(mx);
  C sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    sum += exp(Load<C>(logits, dt, o + c) - mx);
  sum = BlockSum(sum);
  if (threadIdx.x == 0) {
    const C l = mx + log(sum);
    Store<C>(lse, ldt, r, l);
    row_loss[r] = static_cast<double>(l) - Load<double>(logits, dt, o + labels[r]);
  }
}

// ---- the cross-entropy over wide rows (an LM head's vocabulary): one read
// of the logits forward, with a running max and a sum rescaled when the max
// grows (each thread over its own columns, kVec at a time, then merged in a
// fixed order), and a backward over (row, column group) blocks with no
// division per element. f32 compute, any logits dtype but f64.

// A running (max, sum of exp(x - max)); max is NaN once any x is (the loss
// is then NaN, as the CPU's), and a sum over -inf logits only is 0.
struct MaxSum {
  float m = -INFINITY, s = 0.0f;
};

__device__ __forceinline__ float NanMax(float a, float b) { return (a > b || a != a) ? a : b; }

__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  MaxSum r;
  r.m = NanMax(a.m, b.m);
  r.s = r.m == -INFINITY ? 0.0f : a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
  return r;
}

template <int W>
__device__ __forceinline__ void Accumulate(MaxSum& acc, const float (&x)[W]) {
  float m = acc.m;
#pragma unroll
  for (int k = 0; k < W; ++k) m = NanMax(m, x[k]);
  if (m == -INFINITY) return;  // acc and x all -inf (the padded vocabulary)
  float s = acc.s * expf(acc.m - m);
#pragma unroll
  for (int k = 0; k < W; ++k) s += expf(x[k] - m);
  acc.m = m;
  acc.s = s;
}

template <int W>
__global__ void __launch_bounds__(kThreads)
    CrossEntropyRowsOnePassKernel(const void* logits, int dt, const int32_t* labels, int64_t cols,
                                  void* lse, int ldt, double* row_loss) {
  const int64_t r = blockIdx.x, o = r * cols;
  MaxSum acc;
  for (int64_t c = threadIdx.x * static_cast<int64_t>(W); c + W <= cols;
       c += static_cast<int64_t>(blockDim.x) * W) {
    float x[W];
    LoadN(logits, dt, o + c, x);
    Accumulate(acc, x);
  }
  for (int64_t c = cols / W * W + threadIdx.x; c < cols; c += blockDim.x) {
    const float x[1] = {Load<float>(logits, dt, o + c)};
    Accumulate(acc, x);
  }
  // The warp's 32 pairs, then the block's warps, in a fixed order.
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    MaxSum other;
    other.m = __shfl_xor_sync(0xFFFFFFFFu, acc.m, m);
    other.s = __shfl_xor_sync(0xFFFFFFFFu, acc.s, m);
    acc = Merge(acc, other);
  }
  __shared__ MaxSum warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum total = warps[0];
    for (int w = 1; w < kThreads / 32; ++w) total = Merge(total, warps[w]);
    const float l = total.m + logf(total.s);
    Store<float>(lse, ldt, r, l);
    row_loss[r] = static_cast<double>(l) - Load<double>(logits, dt, o + labels[r]);
  }
}

// grid: rows x ColumnBlocks(cols, W) blocks, block b covering row
// b / ColumnBlocks and kThreads * W of its columns.
int64_t ColumnBlocks(int64_t cols, int w) {
  return (cols + static_cast<int64_t>(kThreads) * w - 1) / (static_cast<int64_t>(kThreads) * w);
}

template <int W>
__global__ void __launch_bounds__(kThreads)
    CrossEntropyBackwardRowsKernel(const void* logits, int dt, const int32_t* labels,
                                   const void* lse, int ldt, int64_t rows, int64_t cols,
                                   int64_t col_blocks, const void* dloss, int ddt, void* dx) {
  const float scale =
      static_cast<float>(static_cast<double>(static_cast<float>(Load<double>(dloss, ddt, 0))) /
                         static_cast<double>(rows));
  const int64_t r = blockIdx.x / col_blocks;
  const int64_t c =
      (blockIdx.x % col_blocks) * static_cast<int64_t>(kThreads) * W + threadIdx.x * W;
  if (c >= cols) return;
  const int64_t o = r * cols;
  const float l = Load<float>(lse, ldt, r);
  const int64_t label = labels[r];
  float v[W];  // W = kVec only where cols is a multiple of it: a group never passes cols
  LoadN(logits, dt, o + c, v);
#pragma unroll
  for (int k = 0; k < W; ++k) v[k] = scale * (expf(v[k] - l) - (c + k == label ? 1.0f : 0.0f));
  StoreN(dx, dt, o + c, v);
}

// dloss: the upstream gradient, one element on the device (read here, so the
// host never waits for it); as the CPU, it is taken as an f32 and divided by
// the rows in f64. For f64 logits; the other dtypes take
// CrossEntropyBackwardRowsKernel, which reads dloss the same way.
template <typename C>
__global__ void SoftmaxCrossEntropyBackwardKernel(const void* logits, int dt, const int32_t* labels,
                                                  const void* lse, int ldt, int64_t rows,
                                                  int64_t cols, const void* dloss, int ddt,
                                                  void* dx) {
  const C scale =
      static_cast<C>(static_cast<double>(static_cast<float>(Load<double>(dloss, ddt, 0))) /
                     static_cast<double>(rows));
  GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    const C p = exp(Load<C>(logits, dt, i) - Load<C>(lse, ldt, r));
    Store<C>(dx, dt, i, scale * (p - (c == labels[r] ? C(1) : C(0))));
  }
}

}  // namespace

std::string LaunchSoftmax(const void* x, int xdt, int64_t rows, int64_t cols, bool log, void* y,
                          int ydt, Stream s) {
  if (rows == 0) return "";
  if (AnyF64(xdt, ydt)) {
    LAUNCH(SoftmaxKernel<double>, rows, kThreads, S(s), x, xdt, cols, log, y, ydt);
  } else {
    LAUNCH(SoftmaxKernel<float>, rows, kThreads, S(s), x, xdt, cols, log, y, ydt);
  }
  return Check("SoftmaxKernel");
}

std::string LaunchSoftmaxBackward(const void* y, int ydt, const void* dy, int gdt, int64_t rows,
                                  int64_t cols, bool log, void* dx, int odt, Stream s) {
  if (rows == 0) return "";
  if (AnyF64(ydt, gdt, odt)) {
    LAUNCH(SoftmaxBackwardKernel<double>, rows, kThreads, S(s), y, ydt, dy, gdt, cols, log, dx,
           odt);
  } else {
    LAUNCH(SoftmaxBackwardKernel<float>, rows, kThreads, S(s), y, ydt, dy, gdt, cols, log, dx, odt);
  }
  return Check("SoftmaxBackwardKernel");
}

std::string LaunchSoftmaxCrossEntropy(const void* logits, int dt, const int32_t* labels,
                                      int64_t rows, int64_t cols, void* lse, int ldt,
                                      double* row_loss, double* scratch, void* out, int odt,
                                      Stream s) {
  if (rows == 0) return "";
  if (dt == kF64) {
    LAUNCH(SoftmaxCrossEntropyRowsKernel<double>, rows, kThreads, S(s), logits, dt, labels, cols,
           lse, ldt, row_loss);
  } else if (cols % kVec == 0 && Aligned16(logits)) {
    LAUNCH(CrossEntropyRowsOnePassKernel<kVec>, rows, kThreads, S(s), logits, dt, labels, cols, lse,
           ldt, row_loss);
  } else {
    LAUNCH(CrossEntropyRowsOnePassKernel<1>, rows, kThreads, S(s), logits, dt, labels, cols, lse,
           ldt, row_loss);
  }
  const int blocks = ReduceBlocks(rows);
  LaunchPartialSums(row_loss, kF64, rows, false, scratch, blocks, s);
  LaunchFinishSum(scratch, blocks, 1.0 / static_cast<double>(rows), nullptr, out, odt, s);
  return Check("SoftmaxCrossEntropy");
}

std::string LaunchSoftmaxCrossEntropyBackward(const void* logits, int dt, const int32_t* labels,
                                              const void* lse, int ldt, int64_t rows, int64_t cols,
                                              const void* dloss, int ddt, void* dx, Stream s) {
  const int64_t n = rows * cols;
  if (n == 0) return "";
  if (dt == kF64) {
    LAUNCH(SoftmaxCrossEntropyBackwardKernel<double>, Blocks(n), kThreads, S(s), logits, dt, labels,
           lse, ldt, rows, cols, dloss, ddt, dx);
  } else {
    const int w = cols % kVec == 0 && Aligned16(logits) && Aligned16(dx) ? kVec : 1;
    const int64_t col_blocks = ColumnBlocks(cols, w);
    if (rows * col_blocks > 0x7FFFFFFF) return "cross entropy backward: too many rows";
    const unsigned grid = static_cast<unsigned>(rows * col_blocks);
    if (w == kVec) {
      LAUNCH(CrossEntropyBackwardRowsKernel<kVec>, grid, kThreads, S(s), logits, dt, labels, lse,
             ldt, rows, cols, col_blocks, dloss, ddt, dx);
    } else {
      LAUNCH(CrossEntropyBackwardRowsKernel<1>, grid, kThreads, S(s), logits, dt, labels, lse, ldt,
             rows, cols, col_blocks, dloss, ddt, dx);
    }
  }
  return Check("SoftmaxCrossEntropyBackwardKernel");
}

}  // namespace ampd::engine::cuda
