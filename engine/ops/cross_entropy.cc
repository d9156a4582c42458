#include "engine/ops/cross_entropy.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/cross_entropy.h"
#include "engine/ops/autocast.h"

namespace ampd::engine {

Tensor SoftmaxCrossEntropy(Tensor logits, const std::vector<int32_t>& labels) {
  OpDispatch d(OpId::kCrossEntropy, {&logits});
  CrossEntropyResult r = Kernel<CrossEntropyKernel>(logits.device())(logits, labels);
  Tensor loss = r.loss, lse = r.row_logsumexp;
  d.Finish(loss);
  return Record(
      loss, OpId::kCrossEntropy, {logits},
      [logits, labels, lse](const Tensor& g) -> std::vector<Tensor> {
        return {Kernel<CrossEntropyBackwardKernel>(logits.device())(logits, labels, lse, g)};
      });
}

}  // namespace ampd::engine
