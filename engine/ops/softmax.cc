#include "engine/ops/softmax.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/softmax.h"
#include "engine/ops/autocast.h"

namespace ampd::engine {

namespace {

Tensor SoftmaxImpl(OpId op, bool log, Tensor x) {
  OpDispatch d(op, {&x});
  Tensor y = Kernel<SoftmaxKernel>(x.device())(x, log, d.compute_dtype());
  d.Finish(y);
  Tensor saved = y.Detach();
  return Record(y, op, {x}, [saved, log, x](const Tensor& g) -> std::vector<Tensor> {
    return {Kernel<SoftmaxBackwardKernel>(saved.device())(saved, g, log, x.dtype())};
  });
}

}  // namespace

Tensor Softmax(Tensor x) { return SoftmaxImpl(OpId::kSoftmax, false, x); }

Tensor LogSoftmax(Tensor x) { return SoftmaxImpl(OpId::kLogSoftmax, true, x); }

}  // namespace ampd::engine
