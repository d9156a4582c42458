// The GPT-2 architecture: Hugging Face's parameter names and GPT-2 124M's
// exact parameter count, GPT-2's initialisation, the whole model's gradient
// against finite differences in f64 (with and without dropout), dropout on
// the attention probabilities in training only, and a small one learning the
// fortunes corpus byte by byte with AdamW, in f32 and under bf16 autocast.

#include "engine/nn/gpt.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/autograd/autograd.h"
#include "engine/backend/kernel_registry.h"
#include "engine/backend/kernels/attention.h"
#include "engine/data/text_tokens.h"
#include "engine/data/token_windows.h"
#include "engine/ops/autocast.h"
#include "engine/optim/optimizer.h"
#include "gtest/gtest.h"

namespace ampd::engine::nn {
namespace {

GptSpec Gpt2Small() {
  GptSpec s;
  s.vocab_size = 50257;
  s.block_size = 1024;
  s.n_layer = 12;
  s.n_head = 12;
  s.n_embd = 768;
  return s;
}

// An 11-token vocabulary, contexts of 4, two heads.
GptSpec TinyGpt(int64_t n_layer, int64_t n_embd) {
  GptSpec s;
  s.vocab_size = 11;
  s.block_size = 4;
  s.n_layer = n_layer;
  s.n_head = 2;
  s.n_embd = n_embd;
  return s;
}

TEST(GptTest, Gpt2SmallHasHuggingFacesNamesAndParameterCount) {
  const std::vector<ParameterShape> p = GptParameters(Gpt2Small());
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ParameterShape& s : p) shapes[s.name] = s.shape;
  EXPECT_EQ(GptParameterCount(Gpt2Small()), 124439808);  // transformers' GPT2LMHeadModel
  EXPECT_EQ(p.size(), 2u + 12 * 12 + 2);
  EXPECT_EQ(p.front().name, "wte.weight");
  EXPECT_EQ(shapes["wte.weight"], (std::vector<int64_t>{50257, 768}));
  EXPECT_EQ(shapes["wpe.weight"], (std::vector<int64_t>{1024, 768}));
  EXPECT_EQ(shapes["h.0.ln_1.weight"], (std::vector<int64_t>{768}));
  EXPECT_EQ(shapes["h.11.attn.c_attn.weight"], (std::vector<int64_t>{2304, 768}));  // [out, in]
  EXPECT_EQ(shapes["h.11.attn.c_attn.bias"], (std::vector<int64_t>{2304}));
  EXPECT_EQ(shapes["h.3.attn.c_proj.weight"], (std::vector<int64_t>{768, 768}));
  EXPECT_EQ(shapes["h.5.mlp.c_fc.weight"], (std::vector<int64_t>{3072, 768}));
  EXPECT_EQ(shapes["h.5.mlp.c_proj.weight"], (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(shapes["ln_f.bias"], (std::vector<int64_t>{768}));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);  // tied to wte
  GptSpec untied = Gpt2Small();
  untied.tie_embeddings = false;
  EXPECT_EQ(GptParameterCount(untied), 124439808 + 50257 * 768);
  // 6 N + 12 L T C
  EXPECT_DOUBLE_EQ(GptFlopsPerToken(Gpt2Small()), 6.0 * 124439808 + 12.0 * 12 * 1024 * 768);
}

// nanoGPT's and llm.c's AdamW groups: decay on the linears' 2-D weights,
// none on biases, norms or the (tied) embeddings; and the optimizer obeys it.
TEST(GptTest, WeightDecayAppliesToTheLinearsWeightsOnly) {
  GptSpec s;
  s.n_layer = 2;
  std::unique_ptr<Gpt> gpt = *Gpt::Build(s, 1);
  std::vector<std::string> decayed;
  for (const Parameter& p : gpt->parameters()) {
    if (p.weight_decay) decayed.push_back(p.name);
  }
  EXPECT_EQ(decayed, (std::vector<std::string>{"h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight",
                                               "h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight",
                                               "h.1.attn.c_attn.weight", "h.1.attn.c_proj.weight",
                                               "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.weight"}));
  // A step with zero gradients: only decay moves anything.
  for (Parameter& p : gpt->parameters()) {
    p.value.set_grad(Tensor::Zeros(p.value.shape(), p.value.dtype()));
  }
  optim::OptimizerSpec o;
  o.lr = 0.1;
  o.weight_decay = 0.5;
  optim::Optimizer opt(o, &gpt->parameters(), false);
  std::vector<std::vector<double>> was;
  for (const Parameter& p : gpt->parameters()) was.push_back(p.value.ToDoubles());
  opt.CollectGradients();
  opt.Step(o.lr);
  for (size_t i = 0; i < gpt->parameters().size(); ++i) {
    const Parameter& p = gpt->parameters()[i];
    if (p.weight_decay) {
      EXPECT_NE(p.value.ToDoubles(), was[i]) << p.name;
    } else {
      EXPECT_EQ(p.value.ToDoubles(), was[i]) << p.name;
    }
  }
}

// bias = false (nanoGPT's option): no bias tensors, LayerNorms with a fixed
// zero shift, and every weight still gets a gradient.
TEST(GptTest, WithoutBiasesItHasNoneAndStillTrains) {
  GptSpec s = TinyGpt(1, 8);
  s.bias = false;
  std::unique_ptr<Gpt> gpt = *Gpt::Build(s, 2);
  for (const Parameter& p : gpt->parameters()) {
    EXPECT_EQ(p.name.find("bias"), std::string::npos) << p.name;
  }
  EXPECT_EQ(GptParameterCount(s), 11 * 8 + 4 * 8 + 8 + 24 * 8 + 8 * 8 + 8 + 32 * 8 + 8 * 32 + 8);
  Tensor loss = gpt->Loss({1, 2, 3, 4, 5, 6, 7, 8}, {2, 3, 4, 5, 6, 7, 8, 9}, 2, 4, true);
  EXPECT_TRUE(std::isfinite(loss.ToDoubles()[0]));
  autograd::Backward(loss);
  for (const Parameter& p : gpt->parameters()) EXPECT_TRUE(p.value.grad().defined()) << p.name;
}

// Under bf16 autocast each LayerNorm writes the bf16 its linear (or the LM
// head) computes in (ops/layer_norm.h), while computing in f32; a linear kept
// in f32 by a layer override gets its norm's f32 output, and without
// autocast every norm writes f32.
TEST(GptTest, NormsWriteTheDtypeTheirConsumersComputeIn) {
  const GptSpec s = TinyGpt(2, 16);
  std::unique_ptr<Gpt> gpt = *Gpt::Build(s, 2);
  auto norm_outputs = [&](std::optional<ops::AutocastOptions> region) {
    ops::PlanRecorder recorder;
    {
      std::optional<ops::AutocastScope> scope;
      if (region) scope.emplace(*region);
      gpt->Loss({1, 2, 3, 4, 5, 6, 7, 8}, {2, 3, 4, 5, 6, 7, 8, 9}, 2, 4, true);
    }
    std::map<std::string, std::string> out;
    for (const ops::PlanEntry& e : recorder.entries()) {
      if (e.op != "layer_norm") continue;
      EXPECT_EQ(e.compute_dtype, DType::kF32) << e.layer;
      out[e.layer] = std::string(DTypeName(e.output_dtype));
    }
    return out;
  };
  const std::map<std::string, std::string> all_bf16 = {{"h.0.ln_1", "bf16"},
                                                       {"h.0.ln_2", "bf16"},
                                                       {"h.1.ln_1", "bf16"},
                                                       {"h.1.ln_2", "bf16"},
                                                       {"ln_f", "bf16"}};
  EXPECT_EQ(norm_outputs(ops::AutocastOptions{true, DType::kBF16, std::nullopt}), all_bf16);
  ops::AutocastOverrides keep;
  keep.fp32_layers = {"h.1.mlp.c_fc"};
  std::map<std::string, std::string> one_f32 = all_bf16;
  one_f32["h.1.ln_2"] = "f32";
  EXPECT_EQ(norm_outputs(ops::AutocastOptions{true, DType::kBF16, keep}), one_f32);
  const std::map<std::string, std::string> all_f32 = {{"h.0.ln_1", "f32"},
                                                      {"h.0.ln_2", "f32"},
                                                      {"h.1.ln_1", "f32"},
                                                      {"h.1.ln_2", "f32"},
                                                      {"ln_f", "f32"}};
  EXPECT_EQ(norm_outputs(std::nullopt), all_f32);
  // FP8 block linears cast their f32 input themselves: their norms write
  // f32; the head's still writes bf16.
  const backend::Fp8Recipe recipe;
  gpt = *Gpt::Build(s, 2, DType::kF32, true, &recipe);
  std::map<std::string, std::string> fp8 = all_f32;
  fp8["ln_f"] = "bf16";
  EXPECT_EQ(norm_outputs(ops::AutocastOptions{true, DType::kBF16, std::nullopt}), fp8);
}

TEST(GptTest, ValidationNamesTheField) {
  GptSpec s;
  s.n_head = 3;
  EXPECT_EQ(ValidateGpt(s).message(), "model.gpt.n_head: must divide n_embd (256), got 3");
  s = GptSpec();
  s.dropout = 1.0;
  EXPECT_EQ(ValidateGpt(s).message(), "model.gpt.dropout: must be in [0, 1), got 1");
  s = GptSpec();
  s.block_size = 0;
  EXPECT_FALSE(Gpt::Build(s, 1).ok());
}

TEST(GptTest, InitialisationIsGpt2s) {
  GptSpec s;
  s.n_layer = 8;
  s.vocab_size = 512;
  absl::StatusOr<std::unique_ptr<Gpt>> gpt = Gpt::Build(s, 7);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  auto stddev = [](const Tensor& t) {
    double s2 = 0;
    for (double v : t.ToDoubles()) s2 += v * v;
    return std::sqrt(s2 / t.numel());
  };
  for (const Parameter& p : (*gpt)->parameters()) {
    const std::vector<double> v = p.value.ToDoubles();
    if (p.name.find("bias") != std::string::npos) {
      EXPECT_EQ(v, std::vector<double>(v.size(), 0.0)) << p.name;
    } else if (p.is_norm) {
      EXPECT_EQ(v, std::vector<double>(v.size(), 1.0)) << p.name;
    } else if (p.name.find("c_proj") != std::string::npos) {
      EXPECT_NEAR(stddev(p.value), 0.02 / std::sqrt(16.0), 0.0005) << p.name;
    } else {
      EXPECT_NEAR(stddev(p.value), 0.02, 0.001) << p.name;
    }
  }
  // Same seed, same weights; another seed, others.
  EXPECT_EQ((*Gpt::Build(s, 7))->parameters()[0].value.ToDoubles(),
            (*gpt)->parameters()[0].value.ToDoubles());
  EXPECT_NE((*Gpt::Build(s, 8))->parameters()[0].value.ToDoubles(),
            (*gpt)->parameters()[0].value.ToDoubles());
}

// Every parameter's gradient through the whole model (embeddings, attention,
// MLP, norms, tied head, loss) against central differences, in f64.
// In training with dropout the masks are functions of the dropout seed, so
// the loss is a smooth function of the weights with them fixed: the finite
// differences (the same seed each time) check the backward's masks too.
void CheckWholeModelGradient(double dropout) {
  GptSpec s;
  s.vocab_size = 7;
  s.block_size = 4;
  s.n_layer = 2;
  s.n_head = 2;
  s.n_embd = 8;
  s.dropout = dropout;
  const bool training = dropout > 0;
  const uint64_t dropout_seed = 17;
  absl::StatusOr<std::unique_ptr<Gpt>> gpt = Gpt::Build(s, 3, DType::kF64, false);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  // Larger weights than GPT-2's 0.02, so every path carries signal.
  for (Parameter& p : (*gpt)->parameters()) {
    std::vector<double> v = p.value.ToDoubles();
    for (size_t i = 0; i < v.size(); ++i) v[i] += 0.3 * std::sin(1.7 * i + p.name.size());
    p.value.CopyFrom(Tensor::FromDoubles(v, p.value.shape(), DType::kF64));
  }
  const std::vector<int32_t> tokens = {1, 4, 2, 6, 0, 3, 3, 5}, targets = {4, 2, 6, 0, 3, 3, 5, 1};
  Tensor loss = (*gpt)->Loss(tokens, targets, 2, 4, true, dropout_seed);
  autograd::Backward(loss);
  for (Parameter& p : (*gpt)->parameters()) {
    ASSERT_TRUE(p.value.grad().defined()) << p.name;
    const std::vector<double> analytic = p.value.grad().ToDoubles();
    double* data = p.value.data<double>();
    for (int64_t k = 0; k < p.value.numel(); ++k) {
      autograd::NoGradGuard no_grad;
      const double saved = data[k], h = 1e-6;
      data[k] = saved + h;
      const double up = (*gpt)->Loss(tokens, targets, 2, 4, training, dropout_seed).ToDoubles()[0];
      data[k] = saved - h;
      const double down =
          (*gpt)->Loss(tokens, targets, 2, 4, training, dropout_seed).ToDoubles()[0];
      data[k] = saved;
      const double numeric = (up - down) / (2 * h);
      ASSERT_NEAR(analytic[k], numeric, 1e-6 * std::max(1.0, std::fabs(numeric)))
          << p.name << "[" << k << "] dropout " << dropout;
    }
  }
}

TEST(GptTest, TheWholeModelsGradientMatchesFiniteDifferences) { CheckWholeModelGradient(0.0); }

TEST(GptTest, WithDropoutTheWholeModelsGradientMatchesFiniteDifferences) {
  CheckWholeModelGradient(0.3);
}

// The dropouts the CPU's attention kernel was called with (a spy in its
// registry slot, calling the real one).
std::vector<backend::AttentionDropout>* g_attention_calls = nullptr;
backend::CausalAttentionKernel::Fn g_real_attention = nullptr;
backend::AttentionResult SpyAttention(const Tensor& qkv, int64_t seq_len, int64_t n_head,
                                      const backend::AttentionDropout& dropout) {
  g_attention_calls->push_back(dropout);
  return g_real_attention(qkv, seq_len, n_head, dropout);
}

// nanoGPT's attn_dropout: the model's dropout reaches every layer's
// attention in training, each layer with a mask of its own (its own seed),
// the same seeds for the same dropout seed; none in evaluation.
TEST(GptTest, DropoutReachesTheAttentionProbabilitiesInTrainingOnly) {
  GptSpec s = TinyGpt(3, 8);
  s.dropout = 0.2;
  std::unique_ptr<Gpt> gpt = *Gpt::Build(s, 5);
  const std::vector<int32_t> tokens = {1, 4, 2, 6, 0, 3, 3, 5}, targets = {4, 2, 6, 0, 3, 3, 5, 1};
  auto& slot = backend::KernelSlot<backend::CausalAttentionKernel>(Device::kCpu);
  g_real_attention = slot;
  slot = &SpyAttention;
  std::vector<backend::AttentionDropout> train, again, other, eval;
  autograd::NoGradGuard no_grad;
  g_attention_calls = &train;
  gpt->Loss(tokens, targets, 2, 4, true, 9);
  g_attention_calls = &again;
  gpt->Loss(tokens, targets, 2, 4, true, 9);
  g_attention_calls = &other;
  gpt->Loss(tokens, targets, 2, 4, true, 10);
  g_attention_calls = &eval;
  gpt->Loss(tokens, targets, 2, 4, false, 9);
  slot = g_real_attention;
  ASSERT_EQ(train.size(), 3u);
  ASSERT_EQ(eval.size(), 3u);
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(train[l].p, 0.2) << l;
    EXPECT_EQ(eval[l].p, 0.0) << l;
    EXPECT_EQ(train[l].seed, again[l].seed) << l;
    EXPECT_NE(train[l].seed, other[l].seed) << l;
    for (int k = 0; k < l; ++k) EXPECT_NE(train[l].seed, train[k].seed) << l << " " << k;
  }
}

// A small GPT on the fortunes corpus: the byte-level loss falls from ln 256
// (5.55) below what byte frequencies alone give (the corpus's unigram
// entropy, 3.32 nats/byte), so it uses the context; 300 short steps leave it
// above the bigram entropy (2.59). `seed` sets the initialisation and the
// data order.
double TrainOnFortunes(bool bf16, int steps, int seed = 1) {
  absl::StatusOr<std::string> text = data::ReadFortunes();
  if (!text.ok()) return -1;
  const data::TokenSplit split = data::SplitHeldOut(data::ByteTokens(*text, "fortunes"), 0.05);
  GptSpec s;
  s.vocab_size = 256;
  s.block_size = 32;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_embd = 64;
  std::unique_ptr<Gpt> gpt = *Gpt::Build(s, seed);
  optim::OptimizerSpec o;
  o.lr = 3e-3;
  optim::Optimizer opt(o, &gpt->parameters(), false);
  data::TokenWindows windows = *data::TokenWindows::Create({&split.train}, s.block_size, 4 + seed);
  for (int step = 0; step < steps; ++step) {
    const data::TokenBatch b = windows.Next(16);
    opt.ZeroGrad();
    Tensor loss;
    {
      ops::AutocastScope autocast(bf16, DType::kBF16);
      loss = gpt->Loss(b.inputs, b.targets, b.batch, b.block, true);
    }
    autograd::Backward(loss);
    opt.CollectGradients();
    opt.Step(o.lr);
  }
  autograd::NoGradGuard no_grad;
  double total = 0;
  const std::vector<data::TokenBatch> val = data::EvalWindows(split.val, s.block_size, 16, 128);
  for (const data::TokenBatch& b : val) {
    total += gpt->Loss(b.inputs, b.targets, b.batch, b.block, false).ToDoubles()[0] * b.batch;
  }
  return total / 128;
}

TEST(GptTest, ASmallGptLearnsTheFortunesCorpus) {
  // One run's loss moves by 0.1-0.3 with the seed (or any change in
  // rounding), so precisions are compared on the mean of four seeds (model
  // initialisation and data order both change).
  constexpr int kSeeds = 4;
  double f32 = 0, bf16 = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    const double a = TrainOnFortunes(false, 300, seed);
    if (a < 0) GTEST_SKIP() << "the fortunes corpus is not installed (tools/setup installs it)";
    const double b = TrainOnFortunes(true, 300, seed);
    std::printf("seed %d: val loss after 300 steps: 32-true %.4f, bf16 autocast %.4f\n", seed, a,
                b);
    f32 += a / kSeeds;
    bf16 += b / kSeeds;
  }
  EXPECT_LT(f32, 3.1) << "mean val loss, nats per byte";
  EXPECT_LT(bf16, 3.1);
  EXPECT_NEAR(bf16, f32, 0.05 * f32);  // mixed precision tracks f32
  std::printf("mean val loss after 300 steps: 32-true %.4f, bf16 autocast %.4f nats/byte\n", f32,
              bf16);
}

}  // namespace
}  // namespace ampd::engine::nn
