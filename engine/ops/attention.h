#ifndef AMPD_ENGINE_OPS_ATTENTION_H_
#define AMPD_ENGINE_OPS_ATTENTION_H_

#include <cstdint>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// Causal multi-head self-attention, fused (backend/kernels/attention.h):
// qkv [B*T, 3C] (q, k, v side by side; rows of B sequences of length
// seq_len) -> [B*T, C], as nanoGPT's
// CausalSelfAttention between c_attn and c_proj with
// scaled_dot_product_attention(is_causal=True). Under autocast it runs in the
// low-precision dtype (torch lists SDPA there); its softmax is always f32.
// dropout_p > 0 drops attention probabilities (SDPA's dropout_p; nanoGPT's
// attn_dropout) with a mask that is a function of (dropout_seed, b, h, i,
// j): the same seed, the same mask (backend::AttentionDropout). Callers pass
// it only in training.
Tensor CausalSelfAttention(Tensor qkv, int64_t seq_len, int64_t n_head, double dropout_p = 0,
                           uint64_t dropout_seed = 0);

// One layer's keys and values of the tokens seen so far (generation).
struct KvCache {
  Tensor k, v;         // [B, max_len, C], allocated by the first call
  int64_t length = 0;  // rows filled
};
// The same attention for new rows after the cached ones, without a gradient
// (backend/kernels/attention.h's CachedAttentionKernel): qkv [B*n, 3C] of n
// new tokens for each of `batch` sequences at positions [cache->length, +n); their keys and
// values join the cache (allocated [B, max_len, C] in qkv's dtype, after
// autocast, on first use). Each row equals CausalSelfAttention's for the
// whole sequence. INVALID_ARGUMENT-style failures are the caller's to
// prevent: cache->length + n <= max_len, and the same B and dtype each call.
Tensor CachedSelfAttention(Tensor qkv, KvCache* cache, int64_t batch, int64_t max_len,
                           int64_t n_head);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_ATTENTION_H_
