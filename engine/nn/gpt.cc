#include "engine/nn/gpt.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "engine/core/rng.h"
#include "engine/ops/autocast.h"
#include "engine/ops/fp8_linear.h"
#include "engine/ops/ops.h"

namespace ampd::engine::nn {

using core::FieldError;
using core::Rng;
using ops::Add;
using ops::Cast;
using ops::CausalSelfAttention;
using ops::Dropout;
using ops::Embedding;
using ops::Gelu;
using ops::GeluTanh;
using ops::LayerNorm;
using ops::LayerScope;
using ops::Linear;
using ops::LmHeadCrossEntropy;

namespace {

absl::Status Bad(const std::string& field, const std::string& what) {
  return FieldError("model.gpt." + field, what);
}

double Normal(Rng& rng) {  // Box-Muller on two 53-bit uniforms
  const double u1 = (static_cast<double>(rng.NextU64() >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(rng.NextU64() >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

absl::Status ValidateGpt(const GptSpec& s) {
  if (s.vocab_size < 1) return Bad("vocab_size", absl::StrCat("must be >= 1, got ", s.vocab_size));
  if (s.block_size < 1) return Bad("block_size", absl::StrCat("must be >= 1, got ", s.block_size));
  if (s.n_layer < 1) return Bad("n_layer", absl::StrCat("must be >= 1, got ", s.n_layer));
  if (s.n_embd < 1) return Bad("n_embd", absl::StrCat("must be >= 1, got ", s.n_embd));
  if (s.n_head < 1 || s.n_embd % s.n_head != 0) {
    return Bad("n_head", absl::StrCat("must divide n_embd (", s.n_embd, "), got ", s.n_head));
  }
  if (s.n_embd / s.n_head > 256) {
    return Bad("n_head", absl::StrCat("heads of ", s.n_embd / s.n_head,
                                      " dims are over the attention kernels' 256"));
  }
  if (!(s.dropout >= 0 && s.dropout < 1)) {
    return Bad("dropout", absl::StrCat("must be in [0, 1), got ", s.dropout));
  }
  return absl::OkStatus();
}

std::vector<ParameterShape> GptParameters(const GptSpec& s) {
  using Init = ParameterShape::Init;
  const int64_t C = s.n_embd;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(s.n_layer));
  std::vector<ParameterShape> p;
  auto linear = [&](const std::string& layer, int64_t out, int64_t in, double std) {
    p.push_back({layer + ".weight", layer, {out, in}, false, Init::kNormal, in, std});
    if (s.bias) p.push_back({layer + ".bias", layer, {out}, false, Init::kZeros, in, 0});
  };
  auto norm = [&](const std::string& layer) {
    p.push_back({layer + ".weight", layer, {C}, true, Init::kOnes, 0, 0});
    if (s.bias) p.push_back({layer + ".bias", layer, {C}, true, Init::kZeros, 0, 0});
  };
  p.push_back({"wte.weight", "wte", {s.vocab_size, C}, false, Init::kNormal, 0, 0.02});
  p.push_back({"wpe.weight", "wpe", {s.block_size, C}, false, Init::kNormal, 0, 0.02});
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    norm(h + "ln_1");
    linear(h + "attn.c_attn", 3 * C, C, 0.02);
    linear(h + "attn.c_proj", C, C, residual_std);
    norm(h + "ln_2");
    linear(h + "mlp.c_fc", 4 * C, C, 0.02);
    linear(h + "mlp.c_proj", C, 4 * C, residual_std);
  }
  norm("ln_f");
  if (!s.tie_embeddings) {
    p.push_back({"lm_head.weight", "lm_head", {s.vocab_size, C}, false, Init::kNormal, C, 0.02});
  }
  // Weight decay on the 2-D weights of the linears (and an untied head):
  // not on biases, norms or the embeddings (nanoGPT's and llm.c's groups).
  for (ParameterShape& q : p) {
    q.weight_decay = q.shape.size() == 2 && q.layer != "wte" && q.layer != "wpe";
  }
  return p;
}

int64_t GptParameterCount(const GptSpec& s) {
  int64_t n = 0;
  for (const ParameterShape& p : GptParameters(s)) n += p.numel();
  return n;
}

double GptFlopsPerToken(const GptSpec& s) {
  return 6.0 * static_cast<double>(GptParameterCount(s)) +
         12.0 * static_cast<double>(s.n_layer * s.block_size * s.n_embd);
}

int64_t GptActivationElementsPerToken(const GptSpec& s) {
  const int64_t C = s.n_embd;
  // Per block: ln_1 out, qkv, attention out (+ its logsumexp per head),
  // c_proj out, residual, ln_2 out, c_fc out, GELU out, mlp c_proj out,
  // residual; then ln_f's output and the logits.
  const int64_t per_layer = C + 3 * C + C + s.n_head + C + C + C + 4 * C + 4 * C + C + C;
  return 2 * C + s.n_layer * per_layer + C + s.vocab_size;
}

std::vector<OpId> GptOps(const GptSpec& s, bool fp8) {
  std::vector<OpId> ops = {
      OpId::kEmbedding,
      OpId::kAdd,
      OpId::kLayerNorm,
      OpId::kLinear,
      OpId::kCausalAttention,
      s.activation == GptSpec::Activation::kGeluTanh ? OpId::kGeluTanh : OpId::kGelu,
      OpId::kLmHeadCrossEntropy};
  // GPT-2's MLP as one op (ops/gelu_mlp.h), where it runs as one.
  if (s.activation == GptSpec::Activation::kGeluTanh) ops.push_back(OpId::kGeluTanhMlp);
  if (s.dropout > 0) ops.push_back(OpId::kDropout);
  if (fp8) ops.push_back(OpId::kFp8Linear);
  return ops;
}

ModelShape DescribeGpt(const GptSpec& s) {
  ModelShape shape;
  shape.parameters = GptParameters(s);
  shape.activation_elements_per_example = GptActivationElementsPerToken(s) * s.block_size;
  shape.ops = GptOps(s);
  shape.flops_per_example = GptFlopsPerToken(s) * static_cast<double>(s.block_size);
  shape.tokens_per_example = s.block_size;
  return shape;
}

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::Build(const GptSpec& spec, uint64_t seed,
                                                DType param_dtype, bool norms_fp32,
                                                const backend::Fp8Recipe* fp8,
                                                const std::set<std::string>& fp32_layers) {
  if (absl::Status s = ValidateGpt(spec); !s.ok()) return s;
  std::unique_ptr<Gpt> gpt(new Gpt(spec));
  Rng rng(seed);
  for (const ParameterShape& p : GptParameters(spec)) {
    std::vector<double> v(p.numel(), p.init == ParameterShape::Init::kOnes ? 1.0 : 0.0);
    if (p.init == ParameterShape::Init::kNormal) {
      for (double& x : v) x = static_cast<float>(p.std * Normal(rng));  // drawn in f32
    }
    const DType dt = p.is_norm && norms_fp32 ? DType::kF32 : param_dtype;
    Tensor value = Tensor::FromDoubles(v, p.shape, dt);
    value.set_requires_grad(true).set_name(p.name);
    gpt->index_[p.name] = gpt->params_.size();
    gpt->params_.push_back({p.name, p.layer, p.is_norm, std::move(value), p.weight_decay});
  }
  if (fp8 != nullptr) {
    std::vector<std::string> layers;
    for (int64_t l = 0; l < spec.n_layer; ++l) {
      for (const char* name : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}) {
        std::string layer = absl::StrCat("h.", l, ".", name);
        if (fp32_layers.count(layer) == 0) layers.push_back(std::move(layer));
      }
    }
    gpt->fp8_ = Fp8State::Create(*fp8, std::move(layers));
  }
  return gpt;
}

const Tensor& Gpt::P(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return params_[it->second].value;
  static const Tensor* none = new Tensor();  // no bias (bias = false)
  return *none;
}

Tensor Gpt::Logits(const std::vector<int32_t>& tokens, int64_t batch, int64_t T, bool training,
                   uint64_t dropout_seed) {
  const Tensor x = Features(tokens, batch, T, training, dropout_seed, OpId::kLinear);
  LayerScope scope("lm_head");
  return Linear(x, HeadWeight(), Tensor());
}

const Tensor& Gpt::HeadWeight() const {
  return spec_.tie_embeddings ? P("wte.weight") : P("lm_head.weight");
}

Tensor Gpt::Extend(const std::vector<int32_t>& tokens, int64_t batch, int64_t n, GptCache* cache) {
  const Tensor x = Features(tokens, batch, n, /*training=*/false, 0, OpId::kLinear, cache);
  LayerScope scope("lm_head");
  return Linear(x, HeadWeight(), Tensor());
}

namespace {
// Layer l's attention dropout seed: a stream of its own, apart from the
// embedding and residual dropouts' (dropout_seed * 1000003 + 0, 1, ...).
uint64_t AttentionDropoutSeed(uint64_t dropout_seed, int64_t layer) {
  return dropout_seed * 1000003 + (uint64_t{1} << 32) + static_cast<uint64_t>(layer);
}
}  // namespace

Tensor Gpt::Features(const std::vector<int32_t>& tokens, int64_t batch, int64_t T, bool training,
                     uint64_t dropout_seed, OpId head, GptCache* cache) {
  const GptSpec& s = spec_;
  std::vector<int32_t> cached_positions;
  if (cache != nullptr) {
    cache->layers.resize(s.n_layer);
    cached_positions.resize(batch * T);
    for (int64_t i = 0; i < batch * T; ++i) {
      cached_positions[i] = static_cast<int32_t>(cache->length + i % T);
    }
  } else if (static_cast<int64_t>(positions_.size()) != batch * T) {
    positions_.resize(batch * T);
    for (int64_t i = 0; i < batch * T; ++i) positions_[i] = static_cast<int32_t>(i % T);
  }
  const std::vector<int32_t>& positions = cache != nullptr ? cached_positions : positions_;
  const double p = s.dropout;
  uint64_t dropout_index = 0;
  auto drop = [&](const Tensor& x) {
    return p > 0 ? Dropout(x, p, dropout_seed * 1000003 + dropout_index++, training) : x;
  };
  // LayerNorm with no bias: zeros that are not trained.
  auto norm = [&](const Tensor& x, const std::string& layer,
                  std::optional<DType> feeds = std::nullopt) {
    LayerScope scope(layer);
    const Tensor& w = P(layer + ".weight");
    const Tensor& b = P(layer + ".bias");
    if (b.defined()) return LayerNorm(x, w, b, 1e-5, feeds);
    if (!zero_bias_.defined() || zero_bias_.dtype() != w.dtype() ||
        zero_bias_.device() != w.device()) {
      zero_bias_ = Tensor::Zeros(w.shape(), w.dtype(), w.device());
    }
    return LayerNorm(x, w, zero_bias_, 1e-5, feeds);
  };
  // Evaluations cast with a copy of the FP8 state: they record no amax
  // into the training's histories (nor move its scales).
  std::optional<Fp8State> eval_fp8;
  if (fp8_ && !training) eval_fp8 = fp8_->Scratch();
  const Fp8State* fp8 = fp8_ ? (training ? &*fp8_ : &*eval_fp8) : nullptr;
  auto linear = [&](const Tensor& x, const std::string& layer) {
    LayerScope scope(layer);
    if (fp8 != nullptr) {
      if (const int64_t i = fp8->IndexOf(layer); i >= 0) {
        return ops::Fp8Linear(x, P(layer + ".weight"), P(layer + ".bias"), fp8->For(i));
      }
    }
    return Linear(x, P(layer + ".weight"), P(layer + ".bias"));
  };
  // A block's norm and the linear that reads it: the norm writes the dtype
  // the linear computes in (ops/layer_norm.h), the same bits as the f32 norm
  // cast by the linear. Not for an FP8 linear: it casts its f32 input itself.
  auto norm_linear = [&](const Tensor& x, const std::string& norm_layer, const std::string& layer) {
    std::optional<DType> feeds;
    if (fp8 == nullptr || fp8->IndexOf(layer) < 0) {
      LayerScope scope(layer);
      feeds = ops::AutocastComputeDType(OpId::kLinear, DType::kF32);
    }
    return linear(norm(x, norm_layer, feeds), layer);
  };
  Tensor x;
  {
    Tensor tok, pos;
    {
      LayerScope scope("wte");
      tok = Embedding(P("wte.weight"), tokens);
    }
    {
      LayerScope scope("wpe");
      pos = Embedding(P("wpe.weight"), positions);
    }
    x = Add(tok, pos);
  }
  x = drop(x);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    Tensor a = norm_linear(x, h + "ln_1", h + "attn.c_attn");
    {
      LayerScope scope(h + "attn");
      a = cache != nullptr
              ? ops::CachedSelfAttention(a, &cache->layers[l], batch, s.block_size, s.n_head)
              : CausalSelfAttention(a, T, s.n_head, training ? p : 0.0,
                                    AttentionDropoutSeed(dropout_seed, l));
    }
    x = Add(x, drop(linear(a, h + "attn.c_proj")));
    const std::string fc = h + "mlp.c_fc", proj = h + "mlp.c_proj";
    const bool fp8_mlp = fp8 != nullptr && (fp8->IndexOf(fc) >= 0 || fp8->IndexOf(proj) >= 0);
    if (s.activation == GptSpec::Activation::kGeluTanh && !fp8_mlp) {
      // One op, so that a GPU fuses the GELU into both GEMMs (ops/gelu_mlp.h).
      std::optional<DType> feeds;
      {
        LayerScope scope(fc);
        feeds = ops::AutocastComputeDType(OpId::kLinear, DType::kF32);
      }
      const Tensor n2 = norm(x, h + "ln_2", feeds);
      x = Add(x, drop(ops::GeluTanhMlp(n2, {P(fc + ".weight"), P(fc + ".bias"), fc},
                                       {P(proj + ".weight"), P(proj + ".bias"), proj})));
    } else {
      Tensor m = norm_linear(x, h + "ln_2", fc);
      m = s.activation == GptSpec::Activation::kGeluTanh ? GeluTanh(m) : Gelu(m);
      x = Add(x, drop(linear(m, proj)));
    }
  }
  if (cache != nullptr) cache->length += T;
  std::optional<DType> feeds;
  {
    LayerScope scope("lm_head");
    feeds = ops::AutocastComputeDType(head, DType::kF32);
  }
  return norm(x, "ln_f", feeds);
}

Tensor Gpt::Loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                 int64_t batch, int64_t T, bool training, uint64_t dropout_seed) {
  // The head and the loss fused: the logits exist a chunk of rows at a time.
  const Tensor x = Features(tokens, batch, T, training, dropout_seed, OpId::kLmHeadCrossEntropy);
  LayerScope scope("lm_head");
  return LmHeadCrossEntropy(x, HeadWeight(), targets);
}

}  // namespace ampd::engine::nn
