#include "engine/ops/shape.h"

#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

Tensor Reshape(Tensor x, std::vector<int64_t> shape) {
  OpDispatch d(OpId::kReshape, {&x});
  Tensor y = x.Reshape(shape);
  d.Finish(y);
  return RecordOp(y, OpId::kReshape, {.inputs = {x}});
}

Tensor Flatten(Tensor x) {
  const int64_t rows = x.shape().empty() ? 1 : x.dim(0);
  return Reshape(x, {rows, rows == 0 ? 0 : x.numel() / rows});
}

std::vector<Tensor> ReshapeGradient(const SavedForBackward& s, const Tensor& g) {
  return {g.Reshape(s.inputs[0].shape())};
}

}  // namespace ampd::engine::ops
