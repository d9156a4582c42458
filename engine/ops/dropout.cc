#include "engine/ops/dropout.h"

#include "engine/backend/kernels/dropout.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::DropoutKernel;
using backend::Kernel;

Tensor Dropout(Tensor x, double p, uint64_t seed, bool training) {
  if (!training || p == 0.0) return x;
  OpDispatch d(OpId::kDropout, {&x});
  Tensor y = Kernel<DropoutKernel>(x.device())(x, p, seed);
  d.Finish(y);
  return RecordOp(y, OpId::kDropout, {.inputs = {x}, .scalar = p, .seed = seed});
}

// The mask is a function of (seed, index): applying it to g is the backward.
std::vector<Tensor> DropoutGradient(const SavedForBackward& s, const Tensor& g) {
  return {Kernel<DropoutKernel>(g.device())(g, s.scalar, s.seed)};
}

}  // namespace ampd::engine::ops
