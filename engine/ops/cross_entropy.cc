#include "engine/ops/cross_entropy.h"

#include "engine/backend/kernels/cross_entropy.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::CrossEntropyBackwardKernel;
using backend::CrossEntropyKernel;
using backend::CrossEntropyResult;
using backend::Kernel;

Tensor SoftmaxCrossEntropy(Tensor logits, const std::vector<int32_t>& labels) {
  OpDispatch d(OpId::kCrossEntropy, {&logits});
  CrossEntropyResult r = Kernel<CrossEntropyKernel>(logits.device())(logits, labels);
  Tensor loss = r.loss, lse = r.row_logsumexp;
  d.Finish(loss);
  return RecordOp(loss, OpId::kCrossEntropy, {.inputs = {logits}, .tensors = {lse}, .ids = labels});
}

// g: the upstream gradient where the logits are (on a device, the scaled
// loss's gradient stays there: the kernel reads it).
std::vector<Tensor> CrossEntropyGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor& logits = s.inputs[0];
  return {Kernel<CrossEntropyBackwardKernel>(logits.device())(logits, s.ids, s.tensors[0], g)};
}

}  // namespace ampd::engine::ops
