#include "engine/ops/pooling.h"

#include "engine/backend/kernels/pooling.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::Kernel;
using backend::Pool2dBackwardKernel;
using backend::Pool2dKernel;

namespace {

std::vector<int64_t> Encode(const Pool2dGeometry& g) {
  return {g.kernel[0],   g.kernel[1],   g.stride[0],
          g.stride[1],   g.padding[0],  g.padding[1],
          g.dilation[0], g.dilation[1], g.count_include_pad ? 1 : 0,
          g.output[0],   g.output[1]};
}
Pool2dGeometry Decode(OpId op, const std::vector<int64_t>& p) {
  Pool2dGeometry g;
  g.op = op;
  g.kernel[0] = p[0], g.kernel[1] = p[1];
  g.stride[0] = p[2], g.stride[1] = p[3];
  g.padding[0] = p[4], g.padding[1] = p[5];
  g.dilation[0] = p[6], g.dilation[1] = p[7];
  g.count_include_pad = p[8] != 0;
  g.output[0] = p[9], g.output[1] = p[10];
  return g;
}

}  // namespace

Tensor Pool2d(Tensor x, const Pool2dGeometry& g) {
  OpDispatch d(g.op, {&x});
  Tensor y = Kernel<Pool2dKernel>(x.device())(x, g, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, g.op, {.inputs = {x}, .params = Encode(g)});
}

Tensor MaxPool2d(Tensor x, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  Pool2dGeometry g;
  g.op = OpId::kMaxPool2d;
  for (int d = 0; d < 2; ++d) {
    g.kernel[d] = kernel;
    g.stride[d] = stride == 0 ? kernel : stride;
    g.padding[d] = padding;
    g.dilation[d] = dilation;
  }
  return Pool2d(x, g);
}

Tensor AvgPool2d(Tensor x, int64_t kernel, int64_t stride, int64_t padding,
                 bool count_include_pad) {
  Pool2dGeometry g;
  g.op = OpId::kAvgPool2d;
  for (int d = 0; d < 2; ++d) {
    g.kernel[d] = kernel;
    g.stride[d] = stride == 0 ? kernel : stride;
    g.padding[d] = padding;
  }
  g.count_include_pad = count_include_pad;
  return Pool2d(x, g);
}

Tensor AdaptiveAvgPool2d(Tensor x, int64_t out_h, int64_t out_w) {
  Pool2dGeometry g;
  g.op = OpId::kAdaptiveAvgPool2d;
  g.output[0] = out_h;
  g.output[1] = out_w;
  return Pool2d(x, g);
}

std::vector<Tensor> Pool2dGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor& x = s.inputs[0];
  return {Kernel<Pool2dBackwardKernel>(x.device())(x, g, Decode(s.op, s.params))};
}

}  // namespace ampd::engine::ops
