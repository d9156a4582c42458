// The CPU backend: Embedding lookup and its deterministic backward (rows accumulated in id order).

#include "engine/backend/kernels/embedding.h"

#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"

namespace ampd::engine::cpu {

using backend::EmbeddingBackwardKernel;
using backend::EmbeddingKernel;
using backend::KernelMethod;

Tensor CpuBackendImpl::Embedding(const Tensor& table, const std::vector<int32_t>& ids) {
  const int64_t dim = table.dim(1);
  const int64_t n = static_cast<int64_t>(ids.size());
  Tensor y = Tensor::Uninitialized({n, dim}, table.dtype());
  const size_t row_bytes = dim * DTypeSize(table.dtype());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<uint8_t*>(y.raw()) + i * row_bytes,
                static_cast<const uint8_t*>(table.raw()) + ids[i] * row_bytes, row_bytes);
  }
  return y;
}

Tensor CpuBackendImpl::EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids,
                                         int64_t num_rows) {
  const int64_t dim = dy.dim(-1);
  Values<double> gv(dy);
  std::vector<double> acc(num_rows * dim, 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < dim; ++c) acc[ids[i] * dim + c] += gv[i * dim + c];
  }
  return Tensor::FromDoubles(acc, {num_rows, dim}, dy.dtype());
}

AMPD_REGISTER_KERNEL(EmbeddingKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Embedding>::Call);
AMPD_REGISTER_KERNEL(EmbeddingBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::EmbeddingBackward>::Call);

}  // namespace ampd::engine::cpu
