#ifndef AMPD_ENGINE_BACKEND_KERNELS_EMBEDDING_H_
#define AMPD_ENGINE_BACKEND_KERNELS_EMBEDDING_H_

// Row gather from a table and its gradient (kernel_registry.h). The backward
// is deterministic: rows accumulate in id order, in f64.

#include <cstdint>
#include <vector>

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct EmbeddingKernel {
  static constexpr const char* kName = "embedding";
  static constexpr OpId kOps[] = {OpId::kEmbedding};
  using Fn = Tensor (*)(const Tensor& table, const std::vector<int32_t>& ids);
};
struct EmbeddingBackwardKernel {
  static constexpr const char* kName = "embedding_backward";
  static constexpr OpId kOps[] = {OpId::kEmbedding};
  using Fn = Tensor (*)(const Tensor& dy, const std::vector<int32_t>& ids, int64_t num_rows);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_EMBEDDING_H_
