#ifndef AMPD_ENGINE_OPS_REDUCTIONS_H_
#define AMPD_ENGINE_OPS_REDUCTIONS_H_

// Reductions to a scalar (f32 under autocast).

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

Tensor Sum(Tensor x);
Tensor Mean(Tensor x);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_REDUCTIONS_H_
