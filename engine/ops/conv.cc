#include "engine/ops/conv.h"

#include "engine/autograd/autograd.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::Conv2dBackwardDataKernel;
using backend::Conv2dBackwardWeightKernel;
using backend::Conv2dGeometry;
using backend::Conv2dKernel;
using backend::Conv2dWeightGrads;
using backend::Kernel;
using internal::AsDType;
using internal::NeedsGrad;

namespace {

std::vector<int64_t> Encode(const Conv2dGeometry& g) {
  return {g.stride[0],   g.stride[1],   g.padding[0], g.padding[1],
          g.dilation[0], g.dilation[1], g.groups};
}
Conv2dGeometry Decode(const std::vector<int64_t>& p) {
  Conv2dGeometry g;
  g.stride[0] = p[0], g.stride[1] = p[1];
  g.padding[0] = p[2], g.padding[1] = p[3];
  g.dilation[0] = p[4], g.dilation[1] = p[5];
  g.groups = p[6];
  return g;
}

}  // namespace

Tensor Conv2d(Tensor x, Tensor w, Tensor bias, const Conv2dGeometry& g) {
  OpDispatch d(OpId::kConv2d, {&x, &w, &bias});
  Tensor y = Kernel<Conv2dKernel>(x.device())(x, w, bias, g, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, OpId::kConv2d, {.inputs = {x, w, bias}, .params = Encode(g)});
}

std::vector<Tensor> Conv2dGradient(const SavedForBackward& s, const Tensor& g0) {
  const Tensor &x = s.inputs[0], &w = s.inputs[1], &bias = s.inputs[2];
  const Conv2dGeometry geo = Decode(s.params);
  Tensor g = AsDType(g0, x.dtype());
  // The parameters' gradients first, handed over as soon as they are made
  // (autograd::InputGradReady), so that their all-reduce overlaps the
  // backward-data pass.
  Conv2dWeightGrads wg = Kernel<Conv2dBackwardWeightKernel>(x.device())(
      x, g, w.shape(), bias.defined(), geo, w.dtype());
  Tensor db = bias.defined() ? AsDType(wg.db, bias.dtype()) : Tensor();
  if (db.defined() && autograd::InputGradReady(2, db)) db = Tensor();
  Tensor dw = wg.dw;
  if (autograd::InputGradReady(1, dw)) dw = Tensor();
  Tensor dx = NeedsGrad(x)
                  ? Kernel<Conv2dBackwardDataKernel>(x.device())(g, w, x.shape(), geo, x.dtype())
                  : Tensor();
  return {dx, dw, db};
}

}  // namespace ampd::engine::ops
