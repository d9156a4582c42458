#ifndef AMPD_ENGINE_OPS_LAYER_NORM_H_
#define AMPD_ENGINE_OPS_LAYER_NORM_H_

// LayerNorm over the last dim (torch.nn.functional.layer_norm).

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// along the last dim
Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps = 1e-5);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_LAYER_NORM_H_
