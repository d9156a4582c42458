#ifndef AMPD_ENGINE_CPU_CPU_BACKEND_IMPL_H_
#define AMPD_ENGINE_CPU_CPU_BACKEND_IMPL_H_

// The CPU backend's class. Its kernels are member functions defined one
// family per file, each file registering its own in the kernel registry:
// matmul.cc (oneDNN), elementwise.cc, reductions.cc, softmax.cc (and the
// cross-entropy built on it), layer_norm.cc, embedding.cc; optimizers.cc has
// the device-AMP part (unscale, SGD, AdamW). Internal to engine/cpu.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/kernels/attention.h"
#include "engine/backend/kernels/batch_norm.h"
#include "engine/backend/kernels/conv.h"
#include "engine/backend/kernels/cross_entropy.h"
#include "engine/backend/kernels/layer_norm.h"
#include "engine/backend/kernels/pooling.h"

namespace ampd::engine::cpu {

class CpuBackendImpl final : public backend::Backend {
 public:
  static CpuBackendImpl& Instance();
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu"; }
  double PeakFlops() override;
  Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out);
  Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out);
  Tensor Cast(const Tensor& x, DType dtype);
  Tensor Unary(OpId op, const Tensor& x);
  template <typename C>
  Tensor UnaryImpl(OpId op, const Tensor& x);
  Tensor UnaryBackward(OpId op, const Tensor& x, const Tensor& dy);
  template <typename C>
  Tensor UnaryBackwardImpl(OpId op, const Tensor& x, const Tensor& dy);
  Tensor Binary(OpId op, const Tensor& a, const Tensor& b, DType out);
  template <typename C>
  Tensor BinaryImpl(OpId op, const Tensor& a, const Tensor& b, DType out);
  Tensor BinaryFloat(OpId op, const Tensor& a, const Tensor& b, DType out);
  Tensor Scale(const Tensor& x, double factor, DType out);
  Tensor SumAll(const Tensor& x, DType out);
  Tensor SumRows(const Tensor& x, DType out);
  Tensor Softmax(const Tensor& x, bool log, DType out);
  template <typename C>
  Tensor SoftmaxImpl(const Tensor& x, bool log, DType out);
  Tensor SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out);
  template <typename C>
  Tensor SoftmaxBackwardImpl(const Tensor& y, const Tensor& dy, bool log, DType out);
  backend::LayerNormResult LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     double eps, DType out);
  template <typename C>
  backend::LayerNormResult LayerNormImpl(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         double eps, DType out);
  backend::LayerNormGrads LayerNormBackward(const Tensor& x, const Tensor& gamma,
                                            const backend::LayerNormResult& fwd, const Tensor& dy);
  template <typename C>
  backend::LayerNormGrads LayerNormBackwardImpl(const Tensor& x, const Tensor& gamma,
                                                const backend::LayerNormResult& fwd,
                                                const Tensor& dy);
  // conv.cc
  Tensor Conv2d(const Tensor& x, const Tensor& w, const Tensor& bias,
                const backend::Conv2dGeometry& g, DType out);
  Tensor Conv2dBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& x_shape,
                            const backend::Conv2dGeometry& g, DType out);
  backend::Conv2dWeightGrads Conv2dBackwardWeight(const Tensor& x, const Tensor& dy,
                                                  const std::vector<int64_t>& w_shape, bool bias,
                                                  const backend::Conv2dGeometry& g, DType out);
  // pooling.cc
  Tensor Pool2d(const Tensor& x, const backend::Pool2dGeometry& g, DType out);
  template <typename C>
  Tensor Pool2dImpl(const Tensor& x, const backend::Pool2dGeometry& g, DType out);
  Tensor Pool2dBackward(const Tensor& x, const Tensor& dy, const backend::Pool2dGeometry& g);
  template <typename C>
  Tensor Pool2dBackwardImpl(const Tensor& x, const Tensor& dy, const backend::Pool2dGeometry& g);
  // batch_norm.cc
  backend::BatchNormResult BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     bool training, double momentum, double eps, DType out);
  template <typename C>
  backend::BatchNormResult BatchNormImpl(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         const Tensor& running_mean, const Tensor& running_var,
                                         bool training, double momentum, double eps, DType out);
  backend::BatchNormGrads BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                            const Tensor& mean, const Tensor& rstd,
                                            const Tensor& dy, bool training);
  template <typename C>
  backend::BatchNormGrads BatchNormBackwardImpl(const Tensor& x, const Tensor& gamma,
                                                const Tensor& mean, const Tensor& rstd,
                                                const Tensor& dy, bool training);
  Tensor SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                             Tensor* row_logsumexp);
  Tensor SoftmaxCrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                                     const Tensor& row_logsumexp, float dloss);
  template <typename C>
  Tensor SceBackwardImpl(const Tensor& logits, const std::vector<int32_t>& labels,
                         const Tensor& row_logsumexp, double dloss);
  backend::CrossEntropyResult CrossEntropy(const Tensor& logits,
                                           const std::vector<int32_t>& labels);
  Tensor CrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                              const Tensor& row_logsumexp, const Tensor& dloss);
  Tensor CachedAttention(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                         int64_t past, int64_t n_head);
  template <typename C>
  Tensor CachedAttentionImpl(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                             int64_t past, int64_t n_head);
  backend::AttentionResult CausalAttention(const Tensor& qkv, int64_t seq_len, int64_t n_head,
                                           const backend::AttentionDropout& dropout);
  template <typename C>
  backend::AttentionResult CausalAttentionImpl(const Tensor& qkv, int64_t seq_len, int64_t n_head,
                                               const backend::AttentionDropout& dropout);
  Tensor CausalAttentionBackward(const Tensor& qkv, const Tensor& y, const Tensor& lse,
                                 const Tensor& dy, int64_t seq_len, int64_t n_head,
                                 const backend::AttentionDropout& dropout);
  template <typename C>
  Tensor CausalAttentionBackwardImpl(const Tensor& qkv, const Tensor& y, const Tensor& lse,
                                     const Tensor& dy, int64_t seq_len, int64_t n_head,
                                     const backend::AttentionDropout& dropout);
  Tensor Embedding(const Tensor& table, const std::vector<int32_t>& ids);
  Tensor EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids, int64_t num_rows);
  Tensor Dropout(const Tensor& x, double p, uint64_t seed);  // DropoutKernel
  template <typename C>
  Tensor DropoutImpl(const Tensor& x, double p, uint64_t seed);
  void AddInPlace(const Tensor& x, const Tensor& y, double alpha);
  backend::NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads,
                                          float inv_scale) override;
  double SumOfSquares(const std::vector<Tensor>& tensors) override;
  // Both updates write the parameter in place, a block at a time: each block
  // is read before it is written, so the math (f32, one rounding to the param
  // dtype) is that of computing a new tensor and copying it over.
  void SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
               const SgdHyper& h, bool first) override;
  void AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamWHyper& h) override;
};

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_CPU_BACKEND_IMPL_H_
