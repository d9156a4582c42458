#include "engine/ops/softmax.h"

#include "engine/backend/kernels/softmax.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::Kernel;
using backend::SoftmaxBackwardKernel;
using backend::SoftmaxKernel;

namespace {

Tensor SoftmaxImpl(OpId op, bool log, Tensor x) {
  OpDispatch d(op, {&x});
  Tensor y = Kernel<SoftmaxKernel>(x.device())(x, log, d.compute_dtype());
  d.Finish(y);
  return RecordOp(y, op, {.inputs = {x}, .tensors = {y.Detach()}, .flag = log});
}

}  // namespace

// From the output (y, kept detached), as torch's softmax backward.
std::vector<Tensor> SoftmaxGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor& y = s.tensors[0];
  return {Kernel<SoftmaxBackwardKernel>(y.device())(y, g, s.flag, s.inputs[0].dtype())};
}

Tensor Softmax(Tensor x) { return SoftmaxImpl(OpId::kSoftmax, false, x); }

Tensor LogSoftmax(Tensor x) { return SoftmaxImpl(OpId::kLogSoftmax, true, x); }

}  // namespace ampd::engine::ops
