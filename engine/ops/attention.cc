#include "engine/ops/attention.h"

#include "engine/backend/kernels/attention.h"
#include "engine/ops/autocast.h"
#include "engine/ops/dropout.h"
#include "engine/ops/grad_util.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::AttentionDropout;
using backend::AttentionResult;
using backend::CachedAttentionKernel;
using backend::CausalAttentionBackwardKernel;
using backend::CausalAttentionKernel;
using backend::Kernel;

Tensor CausalSelfAttention(Tensor qkv, int64_t seq_len, int64_t n_head, double dropout_p,
                           uint64_t dropout_seed) {
  if (dropout_p > 0) {
    // The mask's index runs over (b, h, i, j): T * T * n_head values a sequence.
    dropout_seed = ShardDropoutSeed(dropout_seed, qkv.dim(0) * seq_len * n_head);
  }
  OpDispatch d(OpId::kCausalAttention, {&qkv});
  const AttentionDropout dropout{dropout_p, dropout_seed};
  AttentionResult r = Kernel<CausalAttentionKernel>(qkv.device())(qkv, seq_len, n_head, dropout);
  d.Finish(r.y);
  return RecordOp(r.y, OpId::kCausalAttention,
                  {.inputs = {qkv},
                   .tensors = {r.y.Detach(), r.lse},
                   .scalar = dropout_p,
                   .seed = dropout_seed,
                   .count = n_head,
                   .length = seq_len});
}

Tensor CachedSelfAttention(Tensor qkv, KvCache* cache, int64_t batch, int64_t max_len,
                           int64_t n_head) {
  OpDispatch d(OpId::kCausalAttention, {&qkv});
  const int64_t C = qkv.dim(1) / 3;
  if (!cache->k.defined()) {
    cache->k = Tensor::Zeros({batch, max_len, C}, qkv.dtype(), qkv.device());
    cache->v = Tensor::Zeros({batch, max_len, C}, qkv.dtype(), qkv.device());
  }
  Tensor y =
      Kernel<CachedAttentionKernel>(qkv.device())(qkv, cache->k, cache->v, cache->length, n_head);
  cache->length += qkv.dim(0) / batch;
  d.Finish(y);
  return y;
}

// Recomputes the probabilities from the saved logsumexp (flash attention's
// backward), and the dropout mask from its seed; the upstream gradient is
// taken in qkv's dtype.
std::vector<Tensor> AttentionGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor& qkv = s.inputs[0];
  const Tensor dy = internal::AsDType(g, qkv.dtype());
  return {Kernel<CausalAttentionBackwardKernel>(qkv.device())(
      qkv, s.tensors[0], s.tensors[1], dy, s.length, s.count, AttentionDropout{s.scalar, s.seed})};
}

}  // namespace ampd::engine::ops
