#include "engine/ops/reductions.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/ops/autocast.h"

namespace ampd::engine {

Tensor Sum(Tensor x) {
  OpDispatch d(OpId::kSum, {&x});
  Tensor y = Kernel<SumAllKernel>(x.device())(x, d.compute_dtype());
  d.Finish(y);
  return Record(y, OpId::kSum, {x}, [x](const Tensor& g) -> std::vector<Tensor> {
    return {Kernel<BinaryKernel>(x.device())(
        OpId::kMul, Tensor::Full(x.shape(), x.dtype(), 1.0, x.device()), g, x.dtype())};
  });
}

Tensor Mean(Tensor x) {
  OpDispatch d(OpId::kMean, {&x});
  const double inv_n = 1.0 / static_cast<double>(x.numel());
  Tensor y = Kernel<ScaleKernel>(x.device())(Kernel<SumAllKernel>(x.device())(x, DType::kF64),
                                             inv_n, d.compute_dtype());
  d.Finish(y);
  return Record(y, OpId::kMean, {x}, [x, inv_n](const Tensor& g) -> std::vector<Tensor> {
    Tensor ones = Tensor::Full(x.shape(), x.dtype(), inv_n, x.device());
    return {Kernel<BinaryKernel>(x.device())(OpId::kMul, ones, g, x.dtype())};
  });
}

}  // namespace ampd::engine
