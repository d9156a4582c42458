#include "engine/ops/cross_entropy.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"
#include "engine/ops/autocast.h"

namespace ampd::engine {

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

}  // namespace ampd::engine
