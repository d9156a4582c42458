#include "engine/ops/op_def.h"

#include <memory>
#include <utility>

#include "engine/autograd/autograd.h"

namespace ampd::engine::ops {

using autograd::GradEnabled;
using autograd::Record;

Tensor RecordOp(Tensor output, OpId op, SavedForBackward saved) {
  // What Record checks, before anything is kept (evaluation records nothing).
  if (!GradEnabled()) return output;
  bool any = false;
  for (const Tensor& in : saved.inputs) any |= in.defined() && (in.requires_grad() || in.grad_fn());
  if (!any) return output;
  saved.op = op;
  std::vector<Tensor> inputs = saved.inputs;
  const GradientFn gradient = Define(op).gradient;
  auto kept = std::make_shared<const SavedForBackward>(std::move(saved));
  return Record(std::move(output), op, std::move(inputs),
                [gradient, kept](const Tensor& g) { return gradient(*kept, g); });
}

}  // namespace ampd::engine::ops
