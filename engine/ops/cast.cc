#include "engine/ops/cast.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/cast.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"

namespace ampd::engine {

using ops_internal::AsDType;

Tensor Cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = Kernel<CastKernel>(x.device())(x, dtype);
  const DType from = x.dtype();
  return Record(y, OpId::kCast, {x},
                [from](const Tensor& g) -> std::vector<Tensor> { return {AsDType(g, from)}; });
}

}  // namespace ampd::engine
