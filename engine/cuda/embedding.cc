// The CUDA backend: row gather and its deterministic gradient.

#include "engine/backend/kernels/embedding.h"

#include <algorithm>
#include <vector>

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::EmbeddingBackwardKernel;
using backend::EmbeddingKernel;

Tensor CudaBackend::Embedding(const Tensor& table, const std::vector<int32_t>& ids) {
  const int64_t dim = table.dim(1), n = static_cast<int64_t>(ids.size());
  Tensor y = Allocate({n, dim}, table.dtype(), false);
  Tensor d_ids = UploadIds(ids);
  if (Ok()) {
    Record(LaunchEmbedding(table.raw(), Dt(table), d_ids.data<int32_t>(), n, dim, y.raw(), S()));
  }
  return y;
}

namespace {

// The ids grouped, on the host (they are host data): each distinct id, the
// offsets of its group, and the positions of its rows in ascending order, so
// that the kernel sums each table row's gradients in the order the CPU does
// with one writer per row. Counting sort: linear in ids and distinct ids.
std::vector<int32_t> GroupIds(const std::vector<int32_t>& ids, int64_t num_rows,
                              int64_t* distinct) {
  std::vector<int32_t> count(num_rows, 0);
  for (int32_t id : ids) ++count[id];
  std::vector<int32_t> distinct_ids, start(num_rows, 0);
  int32_t at = 0;
  for (int64_t r = 0; r < num_rows; ++r) {
    if (count[r] == 0) continue;
    distinct_ids.push_back(static_cast<int32_t>(r));
    start[r] = at;
    at += count[r];
  }
  const size_t u = distinct_ids.size();
  std::vector<int32_t> groups(u + (u + 1) + ids.size());
  std::copy(distinct_ids.begin(), distinct_ids.end(), groups.begin());
  for (size_t k = 0; k < u; ++k) groups[u + k] = start[distinct_ids[k]];
  groups[2 * u] = at;
  int32_t* positions = groups.data() + 2 * u + 1;
  for (size_t i = 0; i < ids.size(); ++i) positions[start[ids[i]]++] = static_cast<int32_t>(i);
  *distinct = static_cast<int64_t>(u);
  return groups;
}

}  // namespace

Tensor CudaBackend::EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids,
                                      int64_t num_rows) {
  const int64_t dim = dy.dim(-1);
  Tensor out = Allocate({num_rows, dim}, dy.dtype(), false);
  int64_t distinct = 0;
  Tensor groups = UploadIds(GroupIds(ids, num_rows, &distinct));
  if (Ok()) {
    Record(LaunchEmbeddingBackward(dy.raw(), Dt(dy), groups.data<int32_t>(), distinct, dim,
                                   num_rows, out.raw(), S()));
  }
  return out;
}

AMPD_CUDA_KERNEL(EmbeddingKernel, Embedding);
AMPD_CUDA_KERNEL(EmbeddingBackwardKernel, EmbeddingBackward);

}  // namespace ampd::engine::cuda
