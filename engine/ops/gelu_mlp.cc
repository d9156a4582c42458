#include "engine/ops/gelu_mlp.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/gelu_mlp.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/ops/autocast.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/grad_util.h"
#include "engine/ops/linear.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::Kernel;
using backend::LinearGeluTanhKernel;
using backend::LinearKernel;
using backend::MatmulDGeluTanhKernel;
using backend::MatmulKernel;
using backend::SumRowsKernel;

using internal::AsDType;
using internal::NeedsGrad;

namespace {

// The widest of `first` and the defined tensors' dtypes, as OpDispatch takes
// them (an undefined bias takes no part).
DType Widest(DType first, std::initializer_list<const Tensor*> tensors) {
  DType widest = first;
  for (const Tensor* t : tensors) {
    if (t->defined()) widest = core::PromoteTypes(widest, t->dtype());
  }
  return widest;
}

// What the three ops' dispatches would compute in: c_fc's linear, the GELU
// (in the caller's layers), c_proj's linear.
struct ComputeDTypes {
  DType fc, gelu, proj;
};

ComputeDTypes Resolve(const Tensor& x, const MlpLinear& fc, const MlpLinear& proj) {
  ComputeDTypes c;
  {
    LayerScope scope(fc.layer);
    c.fc = AutocastComputeDType(OpId::kLinear, Widest(x.dtype(), {&fc.weight, &fc.bias}));
  }
  c.gelu = AutocastComputeDType(OpId::kGeluTanh, c.fc);
  {
    LayerScope scope(proj.layer);
    c.proj = AutocastComputeDType(OpId::kLinear, Widest(c.gelu, {&proj.weight, &proj.bias}));
  }
  return c;
}

Tensor Unfused(const Tensor& x, const MlpLinear& fc, const MlpLinear& proj) {
  Tensor h;
  {
    LayerScope scope(fc.layer);
    h = Linear(x, fc.weight, fc.bias);
  }
  h = GeluTanh(h);
  LayerScope scope(proj.layer);
  return Linear(h, proj.weight, proj.bias);
}

}  // namespace

bool GeluTanhMlpFuses(const Tensor& x, const MlpLinear& fc, const MlpLinear& proj) {
  const ComputeDTypes c = Resolve(x, fc, proj);
  return c.fc == c.gelu && c.gelu == c.proj && backend::HasKernel(OpId::kGeluTanhMlp, x.device());
}

Tensor GeluTanhMlp(Tensor x, const MlpLinear& fc, const MlpLinear& proj) {
  if (!GeluTanhMlpFuses(x, fc, proj)) return Unfused(x, fc, proj);
  // The three dispatches, each in its layer: the same casts (and autocast's
  // cached weight copies) and plan rows as the three ops.
  Tensor w1 = fc.weight, b1 = fc.bias, w2 = proj.weight, b2 = proj.bias;
  backend::LinearGeluTanhResult r;
  {
    LayerScope scope(fc.layer);
    OpDispatch d(OpId::kLinear, {&x, &w1, &b1});
    r = Kernel<LinearGeluTanhKernel>(x.device())(x, w1, b1, d.compute_dtype());
    d.Finish(r.pre);
  }
  {
    Tensor pre = r.pre;
    OpDispatch d(OpId::kGeluTanh, {&pre});  // pass-through: nothing cast (checked above)
    d.Finish(r.y);
  }
  Tensor h = r.y, y;
  {
    LayerScope scope(proj.layer);
    OpDispatch d(OpId::kLinear, {&h, &w2, &b2});
    y = Kernel<LinearKernel>(x.device())(h, w2, b2, d.compute_dtype());
    d.Finish(y);
  }
  return RecordOp(y, OpId::kGeluTanhMlp, {.inputs = {x, w1, b1, w2, b2}, .tensors = {r.pre, h}});
}

// The gradients of c_proj's linear, the GELU and c_fc's linear, computed as
// LinearGradient, UnaryGradient and LinearGradient compute them and in their
// order, with c_proj's input gradient and the GELU's taken by one kernel.
std::vector<Tensor> GeluTanhMlpGradient(const SavedForBackward& s, const Tensor& g0) {
  const Tensor &x = s.inputs[0], &w1 = s.inputs[1], &b1 = s.inputs[2];
  const Tensor &w2 = s.inputs[3], &b2 = s.inputs[4];
  const Tensor &pre = s.tensors[0], &h = s.tensors[1];
  const Device device = x.device();
  auto matmul = Kernel<MatmulKernel>(device);
  const Tensor g = AsDType(g0, h.dtype());
  // Parameters' gradients as soon as they are made (LinearGradient).
  Tensor db2 = b2.defined() ? Kernel<SumRowsKernel>(device)(g, b2.dtype()) : Tensor();
  if (db2.defined() && autograd::InputGradReady(4, db2)) db2 = Tensor();
  Tensor dw2 = matmul(g, h, true, false, w2.dtype());
  if (autograd::InputGradReady(3, dw2)) dw2 = Tensor();
  backend::DGeluTanhResult d = Kernel<MatmulDGeluTanhKernel>(device)(
      g, w2, pre, b1.defined(), b1.defined() ? b1.dtype() : pre.dtype());
  Tensor db1 = d.dbias;
  if (db1.defined() && autograd::InputGradReady(2, db1)) db1 = Tensor();
  const Tensor dpre = AsDType(d.dpre, x.dtype());
  Tensor dw1 = matmul(dpre, x, true, false, w1.dtype());
  if (autograd::InputGradReady(1, dw1)) dw1 = Tensor();
  Tensor dx = NeedsGrad(x) ? matmul(dpre, w1, false, false, x.dtype()) : Tensor();
  return {dx, dw1, db1, dw2, db2};
}

}  // namespace ampd::engine::ops
