#include "engine/ops/dropout.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/ops/autocast.h"

namespace ampd::engine {

Tensor Dropout(Tensor x, double p, uint64_t seed, bool training) {
  if (!training || p == 0.0) return x;
  OpDispatch d(OpId::kDropout, {&x});
  Tensor y = Kernel<DropoutKernel>(x.device())(x, p, seed);
  d.Finish(y);
  return Record(y, OpId::kDropout, {x}, [p, seed](const Tensor& g) -> std::vector<Tensor> {
    // The mask is a function of (seed, index): applying it to g is the backward.
    return {Kernel<DropoutKernel>(g.device())(g, p, seed)};
  });
}

}  // namespace ampd::engine
