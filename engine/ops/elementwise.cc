#include "engine/ops/elementwise.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"

namespace ampd::engine {

using ops_internal::AsDType;
using ops_internal::ReduceTo;

namespace {

Tensor UnaryOpImpl(OpId op, Tensor x) {
  OpDispatch d(op, {&x});
  Tensor y = BackendOf(x).Unary(op, x);
  d.Finish(y);
  return Record(y, op, {x}, [x, op](const Tensor& g) -> std::vector<Tensor> {
    return {BackendOf(x).UnaryBackward(op, x, AsDType(g, x.dtype()))};
  });
}

Tensor BinaryOpImpl(OpId op, Tensor a, Tensor b) {
  OpDispatch d(op, {&a, &b});
  Tensor y = BackendOf(a).Binary(op, a, b, d.compute_dtype());
  d.Finish(y);
  return Record(y, op, {a, b}, [a, b, op](const Tensor& g) -> std::vector<Tensor> {
    Backend& be = BackendOf(g);
    switch (op) {
      case OpId::kAdd:
        return {AsDType(g, a.dtype()), ReduceTo(AsDType(g, b.dtype()), b)};
      case OpId::kSub:
        return {AsDType(g, a.dtype()), ReduceTo(be.Scale(g, -1.0, b.dtype()), b)};
      case OpId::kMul: {
        Tensor ga = be.Binary(OpId::kMul, g, b, a.dtype());
        Tensor gb_full = be.Binary(OpId::kMul, g, a, g.dtype());
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
  Tensor y = BackendOf(x).Scale(x, factor, x.dtype());
  return Record(y, OpId::kMulScalar, {x}, [factor, x](const Tensor& g) -> std::vector<Tensor> {
    return {BackendOf(g).Scale(g, factor, x.dtype())};
  });
}

void AddInPlace(const Tensor& x, const Tensor& y, double alpha) {
  BackendOf(x).AddInPlace(x, y, alpha);
}

}  // namespace ampd::engine
