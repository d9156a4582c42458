// The CUDA backend: fused causal self-attention (kernels/attention.cu).

#include "engine/backend/kernels/attention.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::AttentionDropout;
using backend::AttentionResult;

AttentionResult CudaBackend::CausalAttention(const Tensor& qkv, int64_t seq_len, int64_t n_head,
                                             const AttentionDropout& dropout) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C = qkv.dim(1) / 3;
  const DType stat = qkv.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  AttentionResult r{Allocate({B * T, C}, qkv.dtype(), false),
                    Allocate({B, n_head, T}, stat, false)};
  if (Ok()) {
    Record(LaunchCausalAttention(qkv.raw(), Dt(qkv), B, T, C, n_head, dropout.p, dropout.seed,
                                 r.y.raw(), r.lse.raw(), Dt(stat), S()));
  }
  return r;
}

Tensor CudaBackend::CausalAttentionBackward(const Tensor& qkv, const Tensor& y, const Tensor& lse,
                                            const Tensor& dy, int64_t seq_len, int64_t n_head,
                                            const AttentionDropout& dropout) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C = qkv.dim(1) / 3;
  const DType stat = qkv.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  Tensor dqkv = Allocate(qkv.shape(), qkv.dtype(), false);
  Tensor delta = Allocate({B, n_head, T}, stat, false);
  if (Ok()) {
    Record(LaunchCausalAttentionBackward(qkv.raw(), y.raw(), dy.raw(), Dt(qkv), lse.raw(), Dt(lse),
                                         B, T, C, n_head, dropout.p, dropout.seed, delta.raw(),
                                         dqkv.raw(), S()));
  }
  return dqkv;
}

Tensor CudaBackend::CachedAttention(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                                    int64_t past, int64_t n_head) {
  const int64_t B = k_cache.dim(0), max_len = k_cache.dim(1), E = k_cache.dim(2);
  Tensor y = Allocate({qkv.dim(0), E}, qkv.dtype(), false);
  if (Ok()) {
    Record(LaunchCachedAttention(qkv.raw(), Dt(qkv), B, qkv.dim(0) / B, E, n_head, max_len, past,
                                 k_cache.raw(), v_cache.raw(), y.raw(), S()));
  }
  return y;
}

AMPD_CUDA_KERNEL(CausalAttentionKernel, CausalAttention);
AMPD_CUDA_KERNEL(CachedAttentionKernel, CachedAttention);
AMPD_CUDA_KERNEL(CausalAttentionBackwardKernel, CausalAttentionBackward);

}  // namespace ampd::engine::cuda
