#ifndef AMPD_ENGINE_BACKEND_KERNELS_ATTENTION_H_
#define AMPD_ENGINE_BACKEND_KERNELS_ATTENTION_H_

// Causal self-attention as one fused kernel (kernel_registry.h), with
// torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
// semantics: softmax(q k^T / sqrt(D) + causal mask) v per head.
//
// Layout (GPT-2's c_attn output, as llm.c's attention takes it): qkv is
// [B*T, 3C], row b*T + t, q, k and v side by side in a row, head h of each at
// [h*D, (h+1)*D) with D = C / n_head; the output is [B*T, C], heads side by
// side (what nanoGPT gets after transposing back). T is the sequence length. The softmax runs
// online in f32 (f64 for f64 input) over tiles of keys, so the T x T probabilities never exist; the
// forward keeps only each row's logsumexp (f32/f64, [B, n_head, T]) and the backward recomputes the
// probabilities from it.

#include <cstdint>

#include "engine/backend/kernel_registry.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct AttentionResult {
  Tensor y;    // [B*T, C], qkv's dtype
  Tensor lse;  // [B, n_head, T]: logsumexp of each row's scaled scores
};
template <typename F>
AttentionResult MapTensors(const AttentionResult& r, F f) {
  return {f(r.y), f(r.lse)};
}

// Dropout on the attention probabilities (nanoGPT's attn_dropout, SDPA's
// dropout_p): probability (b, h, i, j) is kept iff
//   DropoutHash(seed, ((b * n_head + h) * T + i) * T + j) >> 11 >= Threshold()
// (DropoutKeep's rule, in integers), and kept ones are scaled by 1/(1-p).
// The softmax's sum (and so the logsumexp) is over the undropped
// probabilities; only their products with V are masked, as flash attention
// does. The backward regenerates the same mask from (seed, p): dV takes the
// dropped probabilities, dP = dO V^T is masked and scaled the same way, and
// dS = P (dP - delta) with delta = dO . O still holds (O is the dropped
// output). p = 0 is no dropout: the kernels' results are bit for bit those
// without it.
struct AttentionDropout {
  double p = 0;  // in [0, 1)
  uint64_t seed = 0;
  bool active() const { return p > 0; }
  uint64_t Threshold() const { return DropoutThreshold(p); }  // DropoutKeep's rule
  double KeepScale() const { return 1.0 / (1.0 - p); }
};
inline bool AttentionKeep(uint64_t seed, uint64_t threshold, uint64_t index) {
  return (DropoutHash(seed, index) >> 11) >= threshold;
}

struct CausalAttentionKernel {
  static constexpr const char* kName = "causal_attention";
  static constexpr OpId kOps[] = {OpId::kCausalAttention};
  using Fn = AttentionResult (*)(const Tensor& qkv, int64_t seq_len, int64_t n_head,
                                 const AttentionDropout& dropout);
};
// dqkv [B*T, 3C] in qkv's dtype, from the forward's y and lse and dy (and
// the forward's dropout, whose mask it regenerates).
struct CausalAttentionBackwardKernel {
  static constexpr const char* kName = "causal_attention_backward";
  static constexpr OpId kOps[] = {OpId::kCausalAttention};
  using Fn = Tensor (*)(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& dy,
                        int64_t seq_len, int64_t n_head, const AttentionDropout& dropout);
};

// Attention of new tokens against a KV cache (generation; no gradient). qkv
// [B*n, 3C] holds each of B sequences' n new rows of c_attn's output, at
// positions [past, past + n). Their k and v are written into k_cache and
// v_cache ([B, max_len, C], qkv's dtype, past + n <= max_len; rows [0, past)
// filled by earlier calls), then each new query attends to the
// keys up to its own position. Returns y [B*n, C]. Each row is computed as
// CausalAttentionKernel computes the same row of the whole sequence (the
// same tiles, in the same order), so the cache changes nothing.
struct CachedAttentionKernel {
  static constexpr const char* kName = "cached_attention";
  static constexpr OpId kOps[] = {OpId::kCausalAttention};
  using Fn = Tensor (*)(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                        int64_t past, int64_t n_head);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_ATTENTION_H_
