#ifndef AMPD_ENGINE_BACKEND_KERNELS_LAYER_NORM_H_
#define AMPD_ENGINE_BACKEND_KERNELS_LAYER_NORM_H_

// LayerNorm over the last dim and its gradient (kernel_registry.h).

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct LayerNormResult {
  Tensor y;
  Tensor mean;  // f32 (f64 for f64 input), one per row
  Tensor rstd;
};
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};
template <typename F>
LayerNormResult MapTensors(const LayerNormResult& r, F f) {
  return {f(r.y), f(r.mean), f(r.rstd)};
}
template <typename F>
LayerNormGrads MapTensors(const LayerNormGrads& g, F f) {
  return {f(g.dx), f(g.dgamma), f(g.dbeta)};
}

struct LayerNormKernel {
  static constexpr const char* kName = "layer_norm";
  static constexpr OpId kOps[] = {OpId::kLayerNorm};
  using Fn = LayerNormResult (*)(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 double eps, DType out);
};
struct LayerNormBackwardKernel {
  static constexpr const char* kName = "layer_norm_backward";
  static constexpr OpId kOps[] = {OpId::kLayerNorm};
  using Fn = LayerNormGrads (*)(const Tensor& x, const Tensor& gamma, const LayerNormResult& fwd,
                                const Tensor& dy);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_LAYER_NORM_H_
