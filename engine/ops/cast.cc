#include "engine/ops/cast.h"

#include "engine/backend/kernels/cast.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::CastKernel;
using backend::Kernel;

using internal::AsDType;

Tensor Cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = Kernel<CastKernel>(x.device())(x, dtype);
  return RecordOp(y, OpId::kCast, {.inputs = {x}});
}

std::vector<Tensor> CastGradient(const SavedForBackward& s, const Tensor& g) {
  return {AsDType(g, s.inputs[0].dtype())};
}

}  // namespace ampd::engine::ops
