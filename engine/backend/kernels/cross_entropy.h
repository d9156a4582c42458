#ifndef AMPD_ENGINE_BACKEND_KERNELS_CROSS_ENTROPY_H_
#define AMPD_ENGINE_BACKEND_KERNELS_CROSS_ENTROPY_H_

// Softmax cross-entropy over rows of logits (kernel_registry.h).

#include <cstdint>
#include <vector>

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

// The mean over rows of -log softmax(logits)[label], and the per-row
// logsumexp (f32; f64 for f64 logits) the backward uses instead of keeping
// the probabilities.
struct CrossEntropyResult {
  Tensor loss;
  Tensor row_logsumexp;
};
template <typename F>
CrossEntropyResult MapTensors(const CrossEntropyResult& r, F f) {
  return {f(r.loss), f(r.row_logsumexp)};
}

struct CrossEntropyKernel {
  static constexpr const char* kName = "cross_entropy";
  static constexpr OpId kOps[] = {OpId::kCrossEntropy, OpId::kLmHeadCrossEntropy};
  using Fn = CrossEntropyResult (*)(const Tensor& logits, const std::vector<int32_t>& labels);
};
// (softmax - onehot) * dloss / rows. dloss is a one-element tensor, read where
// it is: on a device, the kernel reads it (a loss scaled by a scale kept on
// the device needs no host wait).
struct CrossEntropyBackwardKernel {
  static constexpr const char* kName = "cross_entropy_backward";
  static constexpr OpId kOps[] = {OpId::kCrossEntropy, OpId::kLmHeadCrossEntropy};
  using Fn = Tensor (*)(const Tensor& logits, const std::vector<int32_t>& labels,
                        const Tensor& row_logsumexp, const Tensor& dloss);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_CROSS_ENTROPY_H_
