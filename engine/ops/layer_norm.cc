#include "engine/ops/layer_norm.h"

#include "engine/backend/kernels/layer_norm.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::Kernel;
using backend::LayerNormBackwardKernel;
using backend::LayerNormGrads;
using backend::LayerNormKernel;
using backend::LayerNormResult;

Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps) {
  return LayerNorm(std::move(x), std::move(gamma), std::move(beta), eps, std::nullopt);
}

Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps, std::optional<DType> feeds) {
  const DType x_dtype = x.dtype();
  OpDispatch d(OpId::kLayerNorm, {&x, &gamma, &beta});
  // Outside autocast (Apex O2 keeps norm weights in f32 while activations are
  // f16) the output keeps the activation dtype; under autocast it is f32.
  DType out = AutocastEnabled() ? d.compute_dtype() : x_dtype;
  if (AutocastEnabled() && out == DType::kF32 && feeds && core::IsLowPrecision(*feeds)) {
    out = *feeds;
  }
  LayerNormResult r = Kernel<LayerNormKernel>(x.device())(x, gamma, beta, eps, out);
  d.Finish(r.y);
  return RecordOp(r.y, OpId::kLayerNorm, {.inputs = {x, gamma, beta}, .tensors = {r.mean, r.rstd}});
}

std::vector<Tensor> LayerNormGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor &x = s.inputs[0], &gamma = s.inputs[1];
  const LayerNormResult fwd{Tensor(), s.tensors[0], s.tensors[1]};
  LayerNormGrads gr = Kernel<LayerNormBackwardKernel>(x.device())(x, gamma, fwd, g);
  return {gr.dx, gr.dgamma, gr.dbeta};
}

}  // namespace ampd::engine::ops
