// The CPU backend: Softmax along the last dim, and the cross-entropy built on its log-sum-exp.

#include "engine/backend/kernels/softmax.h"

#include "engine/backend/kernels/cross_entropy.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"

namespace ampd::engine::cpu {

using backend::CrossEntropyBackwardKernel;
using backend::CrossEntropyKernel;
using backend::CrossEntropyResult;
using backend::KernelMethod;
using backend::SoftmaxBackwardKernel;
using backend::SoftmaxKernel;

Tensor CpuBackendImpl::Softmax(const Tensor& x, bool log, DType out) {
  return UsesDouble(x) ? SoftmaxImpl<double>(x, log, out) : SoftmaxImpl<float>(x, log, out);
}

template <typename C>
Tensor CpuBackendImpl::SoftmaxImpl(const Tensor& x, bool log, DType out) {
  const int64_t cols = x.dim(-1), rows = Rows(x);
  Values<C> xv(x);
  Output<C> y(x.shape(), out);
  for (int64_t r = 0; r < rows; ++r) {
    const C* xr = xv.data() + r * cols;
    C mx = -std::numeric_limits<C>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
    C sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    const C lse = mx + std::log(sum);
    for (int64_t c = 0; c < cols; ++c) {
      y[r * cols + c] = log ? xr[c] - lse : std::exp(xr[c] - lse);
    }
  }
  return y.Finish();
}

Tensor CpuBackendImpl::SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out) {
  return UsesDouble(y) ? SoftmaxBackwardImpl<double>(y, dy, log, out)
                       : SoftmaxBackwardImpl<float>(y, dy, log, out);
}

template <typename C>
Tensor CpuBackendImpl::SoftmaxBackwardImpl(const Tensor& y, const Tensor& dy, bool log, DType out) {
  const int64_t cols = y.dim(-1), rows = Rows(y);
  Values<C> yv(y), gv(dy);
  Output<C> dx(y.shape(), out);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * cols;
    C dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += log ? gv[o + c] : gv[o + c] * yv[o + c];
    for (int64_t c = 0; c < cols; ++c) {
      dx[o + c] = log ? gv[o + c] - std::exp(yv[o + c]) * dot : yv[o + c] * (gv[o + c] - dot);
    }
  }
  return dx.Finish();
}

Tensor CpuBackendImpl::SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                                           Tensor* row_logsumexp) {
  const int64_t cols = logits.dim(-1), rows = Rows(logits);
  const bool dbl = UsesDouble(logits);
  Values<double> xv(logits);
  std::vector<double> lse(rows);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = xv.data() + r * cols;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    lse[r] = mx + std::log(sum);
    total += lse[r] - xr[labels[r]];
  }
  if (row_logsumexp)
    *row_logsumexp = Tensor::FromDoubles(lse, {rows}, dbl ? DType::kF64 : DType::kF32);
  return Tensor::Full({}, dbl ? DType::kF64 : DType::kF32, total / rows);
}

Tensor CpuBackendImpl::SoftmaxCrossEntropyBackward(const Tensor& logits,
                                                   const std::vector<int32_t>& labels,
                                                   const Tensor& row_logsumexp, float dloss) {
  return UsesDouble(logits) ? SceBackwardImpl<double>(logits, labels, row_logsumexp, dloss)
                            : SceBackwardImpl<float>(logits, labels, row_logsumexp, dloss);
}

template <typename C>
Tensor CpuBackendImpl::SceBackwardImpl(const Tensor& logits, const std::vector<int32_t>& labels,
                                       const Tensor& row_logsumexp, double dloss) {
  const int64_t cols = logits.dim(-1), rows = Rows(logits);
  Values<C> xv(logits), lv(row_logsumexp);
  Output<C> dx(logits.shape(), logits.dtype());
  const C g = C(dloss / rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const C p = std::exp(xv[r * cols + c] - lv[r]);
      dx[r * cols + c] = g * (p - (c == labels[r] ? C(1) : C(0)));
    }
  }
  return dx.Finish();
}

CrossEntropyResult CpuBackendImpl::CrossEntropy(const Tensor& logits,
                                                const std::vector<int32_t>& labels) {
  CrossEntropyResult r;
  r.loss = SoftmaxCrossEntropy(logits, labels, &r.row_logsumexp);
  return r;
}

// dloss is a host tensor here: read it as the f32 upstream gradient.
Tensor CpuBackendImpl::CrossEntropyBackward(const Tensor& logits,
                                            const std::vector<int32_t>& labels,
                                            const Tensor& row_logsumexp, const Tensor& dloss) {
  return SoftmaxCrossEntropyBackward(logits, labels, row_logsumexp,
                                     static_cast<float>(dloss.Item()));
}

AMPD_REGISTER_KERNEL(SoftmaxKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Softmax>::Call);
AMPD_REGISTER_KERNEL(SoftmaxBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::SoftmaxBackward>::Call);
AMPD_REGISTER_KERNEL(CrossEntropyKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CrossEntropy>::Call);
AMPD_REGISTER_KERNEL(CrossEntropyBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CrossEntropyBackward>::Call);

}  // namespace ampd::engine::cpu
