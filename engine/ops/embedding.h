#ifndef AMPD_ENGINE_OPS_EMBEDDING_H_
#define AMPD_ENGINE_OPS_EMBEDDING_H_

// Embedding lookup.

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

Tensor Embedding(Tensor table, const std::vector<int32_t>& ids);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_EMBEDDING_H_
