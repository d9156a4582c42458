#ifndef AMPD_ENGINE_BACKEND_KERNELS_BATCH_NORM_H_
#define AMPD_ENGINE_BACKEND_KERNELS_BATCH_NORM_H_

// Batch normalisation over the channels of an NCHW tensor (or [N, C]) and its
// gradient (kernel_registry.h), torch.nn.functional.batch_norm's semantics:
// in training the batch's mean and biased variance normalise, and the running
// statistics move by `momentum` toward the batch mean and the unbiased
// variance; in evaluation the running statistics normalise.

#include <cstdint>

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct BatchNormResult {
  Tensor y;
  // Per channel, f32 (f64 for f64 input): the mean and 1/sqrt(var + eps)
  // that normalised (the batch's in training, the running ones in eval).
  Tensor mean, rstd;
};
struct BatchNormGrads {
  Tensor dx, dgamma, dbeta;
};
template <typename F>
BatchNormResult MapTensors(const BatchNormResult& r, F f) {
  return {f(r.y), f(r.mean), f(r.rstd)};
}
template <typename F>
BatchNormGrads MapTensors(const BatchNormGrads& g, F f) {
  return {f(g.dx), f(g.dgamma), f(g.dbeta)};
}

struct BatchNormKernel {
  static constexpr const char* kName = "batch_norm";
  static constexpr OpId kOps[] = {OpId::kBatchNorm};
  // running_mean/running_var ([C], f32 or f64) are updated in place when
  // training. y is in `out`; gamma and beta are [C].
  using Fn = BatchNormResult (*)(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 bool training, double momentum, double eps, DType out);
};
struct BatchNormBackwardKernel {
  static constexpr const char* kName = "batch_norm_backward";
  static constexpr OpId kOps[] = {OpId::kBatchNorm};
  // dx in x's dtype, dgamma/dbeta in gamma's. In training the batch
  // statistics depend on x (and the gradient says so); in eval they do not.
  using Fn = BatchNormGrads (*)(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const Tensor& dy, bool training);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_BATCH_NORM_H_
