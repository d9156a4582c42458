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
  // Batch norm computes in f32 (statistics and normalisation; f64 for f64)
  // whatever x's dtype, and writes x's dtype: PyTorch's batch norm, on the
  // CPU and under cuDNN, takes bf16/f16 input with f32 parameters and is in
  // neither autocast list. So x is not cast: the kernels widen it a row at
  // a time, and bf16 activations stay bf16 through ReLU and pooling to the
  // next convolution. The parameters follow the policy (f32).
  const DType out = x.dtype();
  OpDispatch d(OpId::kBatchNorm, {&gamma, &beta}, {&x});
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
