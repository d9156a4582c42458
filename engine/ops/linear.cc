#include "engine/ops/linear.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"

namespace ampd::engine {

using ops_internal::AsDType;

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

}  // namespace ampd::engine
