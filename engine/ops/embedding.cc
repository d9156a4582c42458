#include "engine/ops/embedding.h"

#include "engine/backend/kernels/embedding.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::EmbeddingBackwardKernel;
using backend::EmbeddingKernel;
using backend::Kernel;

Tensor Embedding(Tensor table, const std::vector<int32_t>& ids) {
  OpDispatch d(OpId::kEmbedding, {&table});
  Tensor y = Kernel<EmbeddingKernel>(table.device())(table, ids);
  d.Finish(y);
  return RecordOp(y, OpId::kEmbedding, {.inputs = {table}, .ids = ids, .count = table.dim(0)});
}

std::vector<Tensor> EmbeddingGradient(const SavedForBackward& s, const Tensor& g) {
  return {Kernel<EmbeddingBackwardKernel>(g.device())(g, s.ids, s.count)};
}

}  // namespace ampd::engine::ops
