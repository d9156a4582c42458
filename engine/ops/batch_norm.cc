#include "engine/ops/batch_norm.h"

#include "engine/backend/kernels/batch_norm.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::BatchNormBackwardKernel;
using backend::BatchNormGrads;
using backend::BatchNormKernel;
using backend::BatchNormResult;
using backend::Kernel;

Tensor BatchNorm(Tensor x, Tensor gamma, Tensor beta, const Tensor& running_mean,
                 const Tensor& running_var, bool training, double momentum, double eps) {
  const DType x_dtype = x.dtype();
  OpDispatch d(OpId::kBatchNorm, {&x, &gamma, &beta});
  // As layer_norm: f32 out under autocast; outside it (Apex O2's f16
  // activations with f32 norm parameters) the activation's dtype.
  const DType out = AutocastEnabled() ? d.compute_dtype() : x_dtype;
  BatchNormResult r = Kernel<BatchNormKernel>(x.device())(x, gamma, beta, running_mean, running_var,
                                                          training, momentum, eps, out);
  d.Finish(r.y);
  return RecordOp(r.y, OpId::kBatchNorm,
                  {.inputs = {x, gamma, beta}, .tensors = {r.mean, r.rstd}, .flag = training});
}

std::vector<Tensor> BatchNormGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor &x = s.inputs[0], &gamma = s.inputs[1];
  BatchNormGrads gr =
      Kernel<BatchNormBackwardKernel>(x.device())(x, gamma, s.tensors[0], s.tensors[1], g, s.flag);
  return {gr.dx, gr.dgamma, gr.dbeta};
}

}  // namespace ampd::engine::ops
