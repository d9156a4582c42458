#include "engine/ops/elementwise.h"

#include "engine/backend/kernels/elementwise.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::AddInPlaceKernel;
using backend::BinaryKernel;
using backend::Kernel;
using backend::ScaleKernel;
using backend::UnaryBackwardKernel;
using backend::UnaryKernel;

using internal::AsDType;
using internal::ReduceTo;

namespace {

Tensor UnaryOpImpl(OpId op, Tensor x) {
  OpDispatch d(op, {&x});
  Tensor y = Kernel<UnaryKernel>(x.device())(op, x);
  d.Finish(y);
  return RecordOp(y, op, {.inputs = {x}});
}

Tensor BinaryOpImpl(OpId op, Tensor a, Tensor b) {
  OpDispatch d(op, {&a, &b}, OpDispatch::WidenInKernel{});
  Tensor y = Kernel<BinaryKernel>(a.device())(op, a, b, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, op, {.inputs = {a, b}});
}

}  // namespace

std::vector<Tensor> UnaryGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor& x = s.inputs[0];
  return {Kernel<UnaryBackwardKernel>(x.device())(s.op, x, AsDType(g, x.dtype()))};
}

std::vector<Tensor> BinaryGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor &a = s.inputs[0], &b = s.inputs[1];
  // An input narrower than the result was widened by the kernel, not by a
  // Cast op (BinaryOpImpl): its gradient is reduced in g's dtype first and
  // then rounded to it, as the Cast's gradient would have done.
  const auto reduce_to_b = [&](const Tensor& full) {
    return AsDType(ReduceTo(full, b, full.dtype()), b.dtype());
  };
  switch (s.op) {
    case OpId::kAdd:
      return {AsDType(g, a.dtype()), reduce_to_b(g)};
    case OpId::kSub:
      return {AsDType(g, a.dtype()),
              reduce_to_b(Kernel<ScaleKernel>(g.device())(g, -1.0, g.dtype()))};
    case OpId::kMul: {
      Tensor ga = Kernel<BinaryKernel>(g.device())(OpId::kMul, g, b, a.dtype());
      return {ga, reduce_to_b(Kernel<BinaryKernel>(g.device())(OpId::kMul, g, a, g.dtype()))};
    }
    default:  // the descriptor gives this gradient to the binary family only
      return {};
  }
}

Tensor Add(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kAdd, a, b); }

Tensor Sub(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kSub, a, b); }

Tensor Mul(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kMul, a, b); }

Tensor Relu(Tensor x) { return UnaryOpImpl(OpId::kRelu, x); }

Tensor Gelu(Tensor x) { return UnaryOpImpl(OpId::kGelu, x); }

Tensor GeluTanh(Tensor x) { return UnaryOpImpl(OpId::kGeluTanh, x); }

Tensor Exp(Tensor x) { return UnaryOpImpl(OpId::kExp, x); }

Tensor Log(Tensor x) { return UnaryOpImpl(OpId::kLog, x); }

Tensor Square(Tensor x) { return UnaryOpImpl(OpId::kSquare, x); }

Tensor MulScalar(Tensor x, double factor) {
  Tensor y = Kernel<ScaleKernel>(x.device())(x, factor, x.dtype());
  return RecordOp(y, OpId::kMulScalar, {.inputs = {x}, .scalar = factor});
}

std::vector<Tensor> MulScalarGradient(const SavedForBackward& s, const Tensor& g) {
  return {Kernel<ScaleKernel>(g.device())(g, s.scalar, s.inputs[0].dtype())};
}

void AddInPlace(const Tensor& x, const Tensor& y, double alpha) {
  Kernel<AddInPlaceKernel>(x.device())(x, y, alpha);
}

}  // namespace ampd::engine::ops
