#ifndef AMPD_ENGINE_OPS_LM_HEAD_H_
#define AMPD_ENGINE_OPS_LM_HEAD_H_

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// A language model's head and loss as one op: the mean over rows of
// cross_entropy(x @ w^T, targets), x [N, C], w [V, C] (the LM head, or the
// tied token embedding). The logits exist only chunk_rows rows at a time, in
// f32 (f64 for f64), and the backward recomputes them chunk by chunk, so a
// 50k vocabulary never needs an [N, V] f32 tensor. Under autocast the GEMMs
// run in the low-precision dtype and softmax and loss in f32, as
// linear + cross_entropy do under torch.autocast.
// The GEMMs run over the vocabulary padded to a multiple of 64 (zero weight
// rows whose logits are -inf): aligned rows for the GEMM libraries, the same
// loss and gradients.
Tensor LmHeadCrossEntropy(Tensor x, Tensor w, const std::vector<int32_t>& targets,
                          int64_t chunk_rows = 1024);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_LM_HEAD_H_
