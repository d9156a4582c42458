#include "engine/ops/embedding.h"

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/embedding.h"
#include "engine/ops/autocast.h"

namespace ampd::engine {

Tensor Embedding(Tensor table, const std::vector<int32_t>& ids) {
  OpDispatch d(OpId::kEmbedding, {&table});
  Tensor y = Kernel<EmbeddingKernel>(table.device())(table, ids);
  d.Finish(y);
  const int64_t rows = table.dim(0);
  return Record(y, OpId::kEmbedding, {table}, [ids, rows](const Tensor& g) -> std::vector<Tensor> {
    return {Kernel<EmbeddingBackwardKernel>(g.device())(g, ids, rows)};
  });
}

}  // namespace ampd::engine
