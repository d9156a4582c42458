// The CUDA backend: row gather and its deterministic gradient.

#include "engine/backend/kernels/embedding.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::EmbeddingBackwardKernel;
using backend::EmbeddingKernel;

Tensor CudaBackend::Embedding(const Tensor& table, const std::vector<int32_t>& ids) {
  const int64_t dim = table.dim(1), n = static_cast<int64_t>(ids.size());
  Tensor y = Allocate({n, dim}, table.dtype(), false);
  Tensor d_ids = UploadLabels(ids);
  if (Ok()) {
    Record(LaunchEmbedding(table.raw(), Dt(table), d_ids.data<int32_t>(), n, dim, y.raw(), S()));
  }
  return y;
}

Tensor CudaBackend::EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids,
                                      int64_t num_rows) {
  const int64_t dim = dy.dim(-1), n = static_cast<int64_t>(ids.size());
  Tensor out = Allocate({num_rows, dim}, dy.dtype(), false);
  Tensor acc = Allocate({num_rows, dim}, DType::kF64, false);
  Tensor d_ids = UploadLabels(ids);
  if (Ok()) {
    Record(LaunchEmbeddingBackward(dy.raw(), Dt(dy), d_ids.data<int32_t>(), n, dim, num_rows,
                                   acc.data<double>(), out.raw(), S()));
  }
  return out;
}

AMPD_CUDA_KERNEL(EmbeddingKernel, Embedding);
AMPD_CUDA_KERNEL(EmbeddingBackwardKernel, EmbeddingBackward);

}  // namespace ampd::engine::cuda
