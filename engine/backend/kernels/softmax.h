#ifndef AMPD_ENGINE_BACKEND_KERNELS_SOFTMAX_H_
#define AMPD_ENGINE_BACKEND_KERNELS_SOFTMAX_H_

// (Log-)softmax along the last dim, and its gradient from the output
// (kernel_registry.h).

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct SoftmaxKernel {
  static constexpr const char* kName = "softmax";
  static constexpr OpId kOps[] = {OpId::kSoftmax, OpId::kLogSoftmax};
  using Fn = Tensor (*)(const Tensor& x, bool log, DType out);
};
struct SoftmaxBackwardKernel {
  static constexpr const char* kName = "softmax_backward";
  static constexpr OpId kOps[] = {OpId::kSoftmax, OpId::kLogSoftmax};
  using Fn = Tensor (*)(const Tensor& y, const Tensor& dy, bool log, DType out);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_SOFTMAX_H_
