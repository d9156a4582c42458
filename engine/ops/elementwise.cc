#include "engine/ops/elementwise.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"

namespace ampd::engine {

using ops_internal::AsDType;
using ops_internal::ReduceTo;

namespace {

Tensor UnaryOpImpl(OpId op, Tensor x) {
  OpDispatch d(op, {&x});
  Tensor y = Kernel<UnaryKernel>(x.device())(op, x);
  d.Finish(y);
  return Record(y, op, {x}, [x, op](const Tensor& g) -> std::vector<Tensor> {
    return {Kernel<UnaryBackwardKernel>(x.device())(op, x, AsDType(g, x.dtype()))};
  });
}

Tensor BinaryOpImpl(OpId op, Tensor a, Tensor b) {
  OpDispatch d(op, {&a, &b});
  Tensor y = Kernel<BinaryKernel>(a.device())(op, a, b, d.compute_dtype());
  d.Finish(y);
  return Record(y, op, {a, b}, [a, b, op](const Tensor& g) -> std::vector<Tensor> {
    switch (op) {
      case OpId::kAdd:
        return {AsDType(g, a.dtype()), ReduceTo(AsDType(g, b.dtype()), b)};
      case OpId::kSub:
        return {AsDType(g, a.dtype()),
                ReduceTo(Kernel<ScaleKernel>(g.device())(g, -1.0, b.dtype()), b)};
      case OpId::kMul: {
        Tensor ga = Kernel<BinaryKernel>(g.device())(OpId::kMul, g, b, a.dtype());
        Tensor gb_full = Kernel<BinaryKernel>(g.device())(OpId::kMul, g, a, g.dtype());
        return {ga, ReduceTo(AsDType(gb_full, b.dtype()), b)};
      }
      default:  // BinaryOpImpl is only called with the binary family
        return {};
    }
  });
}

}  // namespace

Tensor Add(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kAdd, a, b); }

Tensor Sub(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kSub, a, b); }

Tensor Mul(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kMul, a, b); }

Tensor Relu(Tensor x) { return UnaryOpImpl(OpId::kRelu, x); }

Tensor Gelu(Tensor x) { return UnaryOpImpl(OpId::kGelu, x); }

Tensor Exp(Tensor x) { return UnaryOpImpl(OpId::kExp, x); }

Tensor Log(Tensor x) { return UnaryOpImpl(OpId::kLog, x); }

Tensor Square(Tensor x) { return UnaryOpImpl(OpId::kSquare, x); }

Tensor MulScalar(Tensor x, double factor) {
  Tensor y = Kernel<ScaleKernel>(x.device())(x, factor, x.dtype());
  return Record(y, OpId::kMulScalar, {x}, [factor, x](const Tensor& g) -> std::vector<Tensor> {
    return {Kernel<ScaleKernel>(g.device())(g, factor, x.dtype())};
  });
}

void AddInPlace(const Tensor& x, const Tensor& y, double alpha) {
  Kernel<AddInPlaceKernel>(x.device())(x, y, alpha);
}

}  // namespace ampd::engine
