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
Tensor CausalSelfAttention(Tensor qkv, int64_t seq_len, int64_t n_head);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_ATTENTION_H_
