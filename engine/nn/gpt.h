#ifndef AMPD_ENGINE_NN_GPT_H_
#define AMPD_ENGINE_NN_GPT_H_

// A decoder-only transformer with GPT-2's architecture (nanoGPT's model):
// token and position embeddings, n_layer pre-LayerNorm blocks of fused causal
// self-attention and a GELU MLP with residual connections, a final LayerNorm
// and the LM head (tied to the token embedding by default).
//
// Parameters are named as Hugging Face's GPT-2 (`wte.weight`,
// `h.0.attn.c_attn.weight`, ...) so weights can be imported and exported by
// name. Weights are stored as nn.Linear's [out, in]; HF's Conv1D stores the
// transpose, which an importer transposes. Initialisation is GPT-2's:
// N(0, 0.02) for weights and embeddings, zeros for biases, ones for norm
// weights, and the residual projections (attn.c_proj, mlp.c_proj) at
// 0.02 / sqrt(2 * n_layer).
//
// A job asks for it with `model.gpt` (engine/nn/model.h's ModelSpec).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/nn/module.h"
#include "engine/ops/attention.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::nn {

struct GptSpec {
  int64_t vocab_size = 256;
  int64_t block_size = 128;  // the longest context
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 256;
  // nanoGPT's dropout: after the embeddings, on the attention probabilities
  // (inside the fused attention, as SDPA's dropout_p), and after each
  // block's attention and MLP projections.
  double dropout = 0.0;
  bool bias = true;  // biases in the linears and LayerNorms
  bool tie_embeddings = true;
  enum class Activation { kGeluTanh, kGeluErf } activation = Activation::kGeluTanh;
};

// Names the offending field ("model.gpt.n_head: must divide n_embd (256), got 3").
absl::Status ValidateGpt(const GptSpec& spec);

// Every parameter in the model's order, with its HF GPT-2 name and shape.
std::vector<ParameterShape> GptParameters(const GptSpec& spec);
int64_t GptParameterCount(const GptSpec& spec);
// Model FLOPs per trained token (forward and backward): 6 N + 12 L T C, as
// PaLM's appendix and llm.c count them (N parameters, T = block_size).
double GptFlopsPerToken(const GptSpec& spec);
// Elements kept for the backward per token (activation memory; the T x T
// attention matrix is never among them).
int64_t GptActivationElementsPerToken(const GptSpec& spec);
// The ops its forward and backward run (with FP8 block linears: fp8_linear too).
std::vector<OpId> GptOps(const GptSpec& spec, bool fp8 = false);
// All of the above as the model description (an example is one window).
ModelShape DescribeGpt(const GptSpec& spec);

// Generation's KV cache: each layer's keys and values of the tokens so far.
struct GptCache {
  std::vector<ops::KvCache> layers;  // n_layer, filled by Gpt::Extend
  int64_t length = 0;                // tokens cached per sequence
};

class Gpt final : public LanguageModel {
 public:
  // Parameters initialised in f32 from `seed`, then cast to `param_dtype`
  // (LayerNorm weights stay f32 when `norms_fp32`). With `fp8`, the block
  // linears (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) run as FP8
  // GEMMs with that recipe, except those in `fp32_layers` (kept in f32 as
  // the precision's override says); the embeddings, norms, attention and the
  // head never do (Transformer Engine's split).
  static absl::StatusOr<std::unique_ptr<Gpt>> Build(const GptSpec& spec, uint64_t seed,
                                                    DType param_dtype = DType::kF32,
                                                    bool norms_fp32 = true,
                                                    const backend::Fp8Recipe* fp8 = nullptr,
                                                    const std::set<std::string>& fp32_layers = {});

  // Logits [batch * seq_len, vocab] for tokens [batch * seq_len] (row-major
  // sequences, seq_len <= block_size).
  Tensor Logits(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq_len, bool training,
                uint64_t dropout_seed = 0) override;
  // Generation with a KV cache (no gradient): the logits [batch * n, vocab]
  // of n new tokens per sequence (row-major) at positions [cache->length,
  // +n), after the cached ones, whose keys and values then join the cache.
  // Each row equals Logits() of the whole sequence's same row (the cache
  // changes no arithmetic but the GEMMs' row count). The caller keeps
  // cache->length + n <= block_size and one batch size per cache.
  Tensor Extend(const std::vector<int32_t>& tokens, int64_t batch, int64_t n, GptCache* cache);
  // Mean cross-entropy of the next tokens (`targets`, same layout), with the
  // head fused into the loss (ops::LmHeadCrossEntropy: no [N, vocab] logits).
  Tensor Loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
              int64_t batch, int64_t seq_len, bool training, uint64_t dropout_seed = 0) override;

  std::vector<Parameter>& parameters() override { return params_; }
  int64_t activation_elements_per_example() const override {
    return GptActivationElementsPerToken(spec_) * spec_.block_size;
  }
  int64_t vocab_size() const override { return spec_.vocab_size; }
  int64_t block_size() const override { return spec_.block_size; }
  const GptSpec& spec() const { return spec_; }
  Fp8State* fp8() override { return fp8_ ? &*fp8_ : nullptr; }

 private:
  explicit Gpt(const GptSpec& spec) : spec_(spec) {}
  const Tensor& P(const std::string& name) const;
  const Tensor& HeadWeight() const;
  // The final LayerNorm's output [batch * seq_len, n_embd], in the dtype
  // `head` (the op that reads it: the LM head's linear, or its fused
  // cross-entropy) computes in. With `cache`: the tokens follow the cached
  // ones (Extend).
  Tensor Features(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq_len, bool training,
                  uint64_t dropout_seed, ops::OpId head, GptCache* cache = nullptr);
  GptSpec spec_;
  std::vector<Parameter> params_;
  std::map<std::string, size_t> index_;  // name -> position in params_ (fixed after Build)
  Tensor zero_bias_;                     // LayerNorm's beta when bias = false (not trained)
  std::vector<int32_t> positions_;       // 0..T-1 repeated, for the last shape seen
  std::optional<Fp8State> fp8_;
};

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_GPT_H_
