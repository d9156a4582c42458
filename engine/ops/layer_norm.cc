#include "engine/ops/layer_norm.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/layer_norm.h"
#include "engine/ops/autocast.h"

namespace ampd::engine {

Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps) {
  const DType x_dtype = x.dtype();
  OpDispatch d(OpId::kLayerNorm, {&x, &gamma, &beta});
  // Outside autocast (Apex O2 keeps norm weights in f32 while activations are
  // f16) the output keeps the activation dtype; under autocast it is f32.
  const DType out = AutocastEnabled() ? d.compute_dtype() : x_dtype;
  LayerNormResult r = Kernel<LayerNormKernel>(x.device())(x, gamma, beta, eps, out);
  d.Finish(r.y);
  LayerNormResult saved{Tensor(), r.mean, r.rstd};
  return Record(r.y, OpId::kLayerNorm, {x, gamma, beta},
                [x, gamma, saved](const Tensor& g) -> std::vector<Tensor> {
                  LayerNormGrads gr =
                      Kernel<LayerNormBackwardKernel>(x.device())(x, gamma, saved, g);
                  return {gr.dx, gr.dgamma, gr.dbeta};
                });
}

}  // namespace ampd::engine
