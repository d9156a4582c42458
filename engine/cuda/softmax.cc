// The CUDA backend: (log-)softmax and its gradient, and the fused softmax
// cross-entropy (the probabilities are never stored).

#include "engine/backend/kernels/softmax.h"

#include "engine/backend/kernels/cross_entropy.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::CrossEntropyBackwardKernel;
using backend::CrossEntropyKernel;
using backend::SoftmaxBackwardKernel;
using backend::SoftmaxKernel;

Tensor CudaBackend::Softmax(const Tensor& x, bool log, DType out) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  Tensor y = Allocate(x.shape(), out, false);
  if (Ok()) Record(LaunchSoftmax(x.raw(), Dt(x), rows, cols, log, y.raw(), Dt(out), S()));
  return y;
}

Tensor CudaBackend::SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out) {
  const int64_t cols = y.dim(-1), rows = y.numel() / cols;
  Tensor dx = Allocate(y.shape(), out, false);
  if (Ok()) {
    Record(LaunchSoftmaxBackward(y.raw(), Dt(y), dy.raw(), Dt(dy), rows, cols, log, dx.raw(),
                                 Dt(out), S()));
  }
  return dx;
}

Tensor CudaBackend::SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                                        Tensor* row_logsumexp) {
  const int64_t cols = logits.dim(-1), rows = logits.numel() / cols;
  const DType stat = logits.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  Tensor lse = Allocate({rows}, stat, false);
  Tensor row_loss = Allocate({rows}, DType::kF64, false);
  Tensor loss = Allocate({}, stat, false);
  Tensor ids = UploadLabels(labels);
  if (Ok()) {
    Record(LaunchSoftmaxCrossEntropy(logits.raw(), Dt(logits), ids.data<int32_t>(), rows, cols,
                                     lse.raw(), Dt(stat), row_loss.data<double>(), Scratch(),
                                     loss.raw(), Dt(stat), S()));
  }
  if (row_logsumexp) *row_logsumexp = lse;
  return loss;
}

Tensor CudaBackend::SoftmaxCrossEntropyBackward(const Tensor& logits,
                                                const std::vector<int32_t>& labels,
                                                const Tensor& row_logsumexp, float dloss) {
  Tensor on_device = Allocate({1}, DType::kF32, false);
  Fill(on_device, dloss);
  return SoftmaxCrossEntropyBackwardOnDevice(logits, labels, row_logsumexp, on_device);
}

// The upstream gradient (the loss scale times 1/accumulation, on the
// device) is read by the kernel: no host wait in the middle of backward.
Tensor CudaBackend::SoftmaxCrossEntropyBackwardOnDevice(const Tensor& logits,
                                                        const std::vector<int32_t>& labels,
                                                        const Tensor& row_logsumexp,
                                                        const Tensor& dloss) {
  if (dloss.device() != engine::Device::kCuda) {
    return SoftmaxCrossEntropyBackward(logits, labels, row_logsumexp, dloss.Item());
  }
  const int64_t cols = logits.dim(-1), rows = logits.numel() / cols;
  Tensor dx = Allocate(logits.shape(), logits.dtype(), false);
  Tensor ids = UploadLabels(labels);
  if (Ok()) {
    Record(LaunchSoftmaxCrossEntropyBackward(logits.raw(), Dt(logits), ids.data<int32_t>(),
                                             row_logsumexp.raw(), Dt(row_logsumexp), rows, cols,
                                             dloss.raw(), Dt(dloss), dx.raw(), S()));
  }
  return dx;
}

engine::backend::CrossEntropyResult CudaBackend::CrossEntropy(const Tensor& logits,
                                                              const std::vector<int32_t>& labels) {
  engine::backend::CrossEntropyResult r;
  r.loss = SoftmaxCrossEntropy(logits, labels, &r.row_logsumexp);
  return r;
}

Tensor CudaBackend::CrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                                         const Tensor& row_logsumexp, const Tensor& dloss) {
  return SoftmaxCrossEntropyBackwardOnDevice(logits, labels, row_logsumexp, dloss);
}

AMPD_CUDA_KERNEL(SoftmaxKernel, Softmax);
AMPD_CUDA_KERNEL(SoftmaxBackwardKernel, SoftmaxBackward);
AMPD_CUDA_KERNEL(CrossEntropyKernel, CrossEntropy);
AMPD_CUDA_KERNEL(CrossEntropyBackwardKernel, CrossEntropyBackward);

}  // namespace ampd::engine::cuda
