#include "engine/ops/reductions.h"

#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::BinaryKernel;
using backend::Kernel;
using backend::ScaleKernel;
using backend::SumAllKernel;

Tensor Sum(Tensor x) {
  OpDispatch d(OpId::kSum, {&x});
  Tensor y = Kernel<SumAllKernel>(x.device())(x, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, OpId::kSum, {.inputs = {x}});
}

std::vector<Tensor> SumGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor& x = s.inputs[0];
  return {Kernel<BinaryKernel>(x.device())(
      OpId::kMul, Tensor::Full(x.shape(), x.dtype(), 1.0, x.device()), g, x.dtype())};
}

Tensor Mean(Tensor x) {
  OpDispatch d(OpId::kMean, {&x});
  const double inv_n = 1.0 / static_cast<double>(x.numel());
  Tensor y = Kernel<ScaleKernel>(x.device())(Kernel<SumAllKernel>(x.device())(x, DType::kF64),
                                             inv_n, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, OpId::kMean, {.inputs = {x}, .scalar = inv_n});
}

std::vector<Tensor> MeanGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor& x = s.inputs[0];
  Tensor ones = Tensor::Full(x.shape(), x.dtype(), s.scalar, x.device());
  return {Kernel<BinaryKernel>(x.device())(OpId::kMul, ones, g, x.dtype())};
}

}  // namespace ampd::engine::ops
