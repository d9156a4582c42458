#include "engine/ops/linear.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::Kernel;
using backend::LinearKernel;
using backend::MatmulKernel;
using backend::SumRowsKernel;

using internal::AsDType;
using internal::NeedsGrad;

Tensor Matmul(Tensor a, Tensor b) {
  OpDispatch d(OpId::kMatmul, {&a, &b});
  Tensor y = Kernel<MatmulKernel>(a.device())(a, b, false, false, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, OpId::kMatmul, {.inputs = {a, b}});
}

std::vector<Tensor> MatmulGradient(const SavedForBackward& s, const Tensor& g0) {
  const Tensor &a = s.inputs[0], &b = s.inputs[1];
  auto matmul = Kernel<MatmulKernel>(a.device());
  Tensor g = AsDType(g0, a.dtype());
  return {NeedsGrad(a) ? matmul(g, b, false, true, a.dtype()) : Tensor(),
          NeedsGrad(b) ? matmul(a, g, true, false, b.dtype()) : Tensor()};
}

Tensor Linear(Tensor x, Tensor w, Tensor b) {
  OpDispatch d(OpId::kLinear, {&x, &w, &b});
  Tensor y = Kernel<LinearKernel>(x.device())(x, w, b, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, OpId::kLinear, {.inputs = {x, w, b}});
}

std::vector<Tensor> LinearGradient(const SavedForBackward& s, const Tensor& g0) {
  const Tensor &x = s.inputs[0], &w = s.inputs[1], &b = s.inputs[2];
  auto matmul = Kernel<MatmulKernel>(x.device());
  Tensor g = AsDType(g0, x.dtype());
  // The parameters' gradients first, handed over as soon as they are made:
  // a data-parallel all-reduce of them overlaps the input gradient's GEMM.
  Tensor db = b.defined() ? Kernel<SumRowsKernel>(x.device())(g, b.dtype()) : Tensor();
  if (db.defined() && autograd::InputGradReady(2, db)) db = Tensor();
  Tensor dw = matmul(g, x, true, false, w.dtype());  // [out,M] @ [M,in]
  if (autograd::InputGradReady(1, dw)) dw = Tensor();
  Tensor dx = NeedsGrad(x) ? matmul(g, w, false, false, x.dtype()) : Tensor();  // [M,out]@[out,in]
  return {dx, dw, db};
}

}  // namespace ampd::engine::ops
