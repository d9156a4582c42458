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

// dloss: the upstream gradient, one element on the device (read here, so the
// host never waits for it); as the CPU, it is taken as an f32 and divided by
// the rows in f64.
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
  } else {
    LAUNCH(SoftmaxCrossEntropyRowsKernel<float>, rows, kThreads, S(s), logits, dt, labels, cols,
           lse, ldt, row_loss);
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
    LAUNCH(SoftmaxCrossEntropyBackwardKernel<float>, Blocks(n), kThreads, S(s), logits, dt, labels,
           lse, ldt, rows, cols, dloss, ddt, dx);
  }
  return Check("SoftmaxCrossEntropyBackwardKernel");
}

}  // namespace ampd::engine::cuda
