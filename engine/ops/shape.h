#ifndef AMPD_ENGINE_OPS_SHAPE_H_
#define AMPD_ENGINE_OPS_SHAPE_H_

// Ops that change a tensor's shape but not its values: views of the same
// storage (torch.reshape on a contiguous tensor), so they run no kernel.

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// `shape` must hold as many elements as x.
Tensor Reshape(Tensor x, std::vector<int64_t> shape);
// [N, ...] -> [N, prod(...)] (nn.Flatten's default start_dim=1).
Tensor Flatten(Tensor x);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_SHAPE_H_
