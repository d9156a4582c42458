#ifndef AMPD_ENGINE_OPS_LAYER_NORM_H_
#define AMPD_ENGINE_OPS_LAYER_NORM_H_

// LayerNorm over the last dim (torch.nn.functional.layer_norm).

#include <optional>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// along the last dim
Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps = 1e-5);

// The same, told the dtype its result's consumer computes in (a transformer
// block's linear after its norm: AutocastComputeDType). When the norm's
// result would be f32 and `feeds` is f16 or bf16, the norm writes `feeds`:
// its f32 result rounded once, as the consumer's own cast would round it,
// with no f32 copy forward and no f32 gradient backward (Transformer
// Engine's LayerNormLinear does the same). The same bits either way.
Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps, std::optional<DType> feeds);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_LAYER_NORM_H_
