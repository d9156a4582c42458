#include "engine/ops/ops.h"

#include "engine/ops/autocast.h"
#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"

namespace ampd::engine {
namespace {

// Gradient of a broadcast operand: reduce back to its own shape.
Tensor ReduceTo(const Tensor& grad, const Tensor& like) {
  Backend& be = BackendOf(grad);
  if (like.numel() == grad.numel()) return grad;
  if (like.numel() == 1) {
    Tensor s = be.SumAll(grad, like.dtype());
    return s;
  }
  return be.SumRows(grad, like.dtype());
}

Tensor AsDType(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : BackendOf(t).Cast(t, dtype);
}

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

Tensor Cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = BackendOf(x).Cast(x, dtype);
  const DType from = x.dtype();
  return Record(y, OpId::kCast, {x},
                [from](const Tensor& g) -> std::vector<Tensor> { return {AsDType(g, from)}; });
}

Tensor Matmul(Tensor a, Tensor b) {
  OpDispatch d(OpId::kMatmul, {&a, &b});
  Tensor y = BackendOf(a).Matmul(a, b, false, false, d.compute_dtype());
  d.Finish(y);
  return Record(y, OpId::kMatmul, {a, b}, [a, b](const Tensor& g0) -> std::vector<Tensor> {
    Backend& be = BackendOf(a);
    Tensor g = AsDType(g0, a.dtype());
    return {be.Matmul(g, b, false, true, a.dtype()), be.Matmul(a, g, true, false, b.dtype())};
  });
}

Tensor Linear(Tensor x, Tensor w, Tensor b) {
  OpDispatch d(OpId::kLinear, {&x, &w, &b});
  Backend& be = BackendOf(x);
  Tensor y = be.Linear(x, w, b, d.compute_dtype());
  d.Finish(y);
  return Record(y, OpId::kLinear, {x, w, b}, [x, w, b](const Tensor& g0) -> std::vector<Tensor> {
    Backend& be = BackendOf(x);
    Tensor g = AsDType(g0, x.dtype());
    Tensor dx = be.Matmul(g, w, false, false, x.dtype());  // [M,out] @ [out,in]
    Tensor dw = be.Matmul(g, x, true, false, w.dtype());   // [out,M] @ [M,in]
    Tensor db = b.defined() ? be.SumRows(g, b.dtype()) : Tensor();
    return {dx, dw, db};
  });
}

Tensor Add(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kAdd, a, b); }
Tensor Sub(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kSub, a, b); }
Tensor Mul(Tensor a, Tensor b) { return BinaryOpImpl(OpId::kMul, a, b); }
Tensor Relu(Tensor x) { return UnaryOpImpl(OpId::kRelu, x); }
Tensor Gelu(Tensor x) { return UnaryOpImpl(OpId::kGelu, x); }
Tensor Exp(Tensor x) { return UnaryOpImpl(OpId::kExp, x); }
Tensor Log(Tensor x) { return UnaryOpImpl(OpId::kLog, x); }
Tensor Square(Tensor x) { return UnaryOpImpl(OpId::kSquare, x); }

namespace {
Tensor SoftmaxImpl(OpId op, bool log, Tensor x) {
  OpDispatch d(op, {&x});
  Tensor y = BackendOf(x).Softmax(x, log, d.compute_dtype());
  d.Finish(y);
  Tensor saved = y.Detach();
  return Record(y, op, {x}, [saved, log, x](const Tensor& g) -> std::vector<Tensor> {
    return {BackendOf(saved).SoftmaxBackward(saved, g, log, x.dtype())};
  });
}
}  // namespace

Tensor Softmax(Tensor x) { return SoftmaxImpl(OpId::kSoftmax, false, x); }
Tensor LogSoftmax(Tensor x) { return SoftmaxImpl(OpId::kLogSoftmax, true, x); }

Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps) {
  const DType x_dtype = x.dtype();
  OpDispatch d(OpId::kLayerNorm, {&x, &gamma, &beta});
  // Outside autocast (Apex O2 keeps norm weights in f32 while activations are
  // f16) the output keeps the activation dtype; under autocast it is f32.
  const DType out = AutocastEnabled() ? d.compute_dtype() : x_dtype;
  LayerNormResult r = BackendOf(x).LayerNorm(x, gamma, beta, eps, out);
  d.Finish(r.y);
  LayerNormResult saved{Tensor(), r.mean, r.rstd};
  return Record(r.y, OpId::kLayerNorm, {x, gamma, beta},
                [x, gamma, saved](const Tensor& g) -> std::vector<Tensor> {
                  LayerNormGrads gr = BackendOf(x).LayerNormBackward(x, gamma, saved, g);
                  return {gr.dx, gr.dgamma, gr.dbeta};
                });
}

Tensor SoftmaxCrossEntropy(Tensor logits, const std::vector<int32_t>& labels) {
  OpDispatch d(OpId::kCrossEntropy, {&logits});
  Tensor lse;
  Tensor loss = BackendOf(logits).SoftmaxCrossEntropy(logits, labels, &lse);
  d.Finish(loss);
  return Record(
      loss, OpId::kCrossEntropy, {logits},
      [logits, labels, lse](const Tensor& g) -> std::vector<Tensor> {
        return {BackendOf(logits).SoftmaxCrossEntropyBackwardOnDevice(logits, labels, lse, g)};
      });
}

Tensor Embedding(Tensor table, const std::vector<int32_t>& ids) {
  OpDispatch d(OpId::kEmbedding, {&table});
  Tensor y = BackendOf(table).Embedding(table, ids);
  d.Finish(y);
  const int64_t rows = table.dim(0);
  return Record(y, OpId::kEmbedding, {table}, [ids, rows](const Tensor& g) -> std::vector<Tensor> {
    return {BackendOf(g).EmbeddingBackward(g, ids, rows)};
  });
}

Tensor Dropout(Tensor x, double p, uint64_t seed, bool training) {
  if (!training || p == 0.0) return x;
  OpDispatch d(OpId::kDropout, {&x});
  Tensor y = BackendOf(x).Dropout(x, p, seed);
  d.Finish(y);
  return Record(y, OpId::kDropout, {x}, [p, seed](const Tensor& g) -> std::vector<Tensor> {
    // The mask is a function of (seed, index): applying it to g is the backward.
    return {BackendOf(g).Dropout(g, p, seed)};
  });
}

Tensor Sum(Tensor x) {
  OpDispatch d(OpId::kSum, {&x});
  Tensor y = BackendOf(x).SumAll(x, d.compute_dtype());
  d.Finish(y);
  return Record(y, OpId::kSum, {x}, [x](const Tensor& g) -> std::vector<Tensor> {
    return {BackendOf(x).Binary(OpId::kMul, Tensor::Full(x.shape(), x.dtype(), 1.0, x.device()),
                                g, x.dtype())};
  });
}

Tensor Mean(Tensor x) {
  OpDispatch d(OpId::kMean, {&x});
  const double inv_n = 1.0 / static_cast<double>(x.numel());
  Tensor y = BackendOf(x).Scale(BackendOf(x).SumAll(x, DType::kF64), inv_n, d.compute_dtype());
  d.Finish(y);
  return Record(y, OpId::kMean, {x}, [x, inv_n](const Tensor& g) -> std::vector<Tensor> {
    Tensor ones = Tensor::Full(x.shape(), x.dtype(), inv_n, x.device());
    return {BackendOf(x).Binary(OpId::kMul, ones, g, x.dtype())};
  });
}

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
