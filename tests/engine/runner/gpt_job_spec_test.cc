// model.gpt and data.tokens in the job spec: every field validated by name,
// the defaults filled, the three token sources loaded (with errors naming the
// file), and ExplainPrecision's plan of a GPT.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/data/token_shard.h"
#include "engine/nn/gpt.h"
#include "engine/runner/job_spec.h"
#include "engine/train/explain.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using amp::ResolvePrecision;
using nn::GptSpec;
using optim::OptimizerSpec;
using runner::FieldViolation;
using runner::JobSpecContext;
using runner::LoadJobData;
using runner::ParseJobSpecJson;
using runner::ResolveJobSpec;
using runner::ValidateJobSpec;
using train::ExplainPrecision;

namespace {

ampd::v1::JobSpec Parse(const std::string& json) {
  auto spec = ParseJobSpecJson(json, "test.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ampd::v1::JobSpec();
}

// field -> description
std::map<std::string, std::string> Violations(const std::string& json) {
  std::map<std::string, std::string> out;
  for (const FieldViolation& v : ValidateJobSpec(Parse(json), {})) out[v.field] = v.description;
  return out;
}

std::string Root() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp ? tmp : "/tmp";
}

void Write(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(GptJobSpecTest, DefaultsFollowTheDataAndGpt2) {
  auto job =
      ResolveJobSpec(Parse(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"}})"), {});
  ASSERT_TRUE(job.ok()) << job.status();
  const GptSpec& g = std::get<GptSpec>(job->config.model);
  EXPECT_EQ(g.vocab_size, 256);  // byte-level
  EXPECT_EQ(g.block_size, 128);
  EXPECT_EQ(g.n_layer, 4);
  EXPECT_EQ(g.n_head, 4);
  EXPECT_EQ(g.n_embd, 256);
  EXPECT_TRUE(g.bias);
  EXPECT_TRUE(g.tie_embeddings);
  EXPECT_EQ(g.activation, GptSpec::Activation::kGeluTanh);
  auto shards = ResolveJobSpec(Parse(R"({"model": {"gpt": {"activation": "ACTIVATION_GELU",
      "bias": false, "tieEmbeddings": false}},
      "data": {"tokens": {"shards": {"train": ["a.bin"]}}}})"),
                               {});
  ASSERT_TRUE(shards.ok()) << shards.status();
  const GptSpec& s = std::get<GptSpec>(shards->config.model);
  EXPECT_EQ(s.vocab_size, 50257);  // GPT-2's tokenizer
  EXPECT_EQ(s.activation, GptSpec::Activation::kGeluErf);
  EXPECT_FALSE(s.bias);
  EXPECT_FALSE(s.tie_embeddings);
}

TEST(GptJobSpecTest, EveryBadGptFieldIsNamed) {
  auto v = Violations(R"({"model": {"gpt": {"vocabSize": "-1", "blockSize": "-2", "nLayer": "-3",
      "nHead": "-4", "nEmbd": "-5", "activation": "ACTIVATION_RELU"}},
      "data": {"builtin": "fortunes"}})");
  for (const char* f : {"model.gpt.vocab_size", "model.gpt.block_size", "model.gpt.n_layer",
                        "model.gpt.n_head", "model.gpt.n_embd", "model.gpt.activation"}) {
    EXPECT_EQ(v.count(f), 1u) << f;
  }
  v = Violations(
      R"({"model": {"gpt": {"nHead": "3", "dropout": 1.0}}, "data": {"builtin": "fortunes"}})");
  EXPECT_NE(v["model.gpt.n_head"].find("must divide n_embd (256)"), std::string::npos);
  v = Violations(R"({"model": {"gpt": {"dropout": 1.0}}, "data": {"builtin": "fortunes"}})");
  EXPECT_EQ(v.count("model.gpt.dropout"), 1u);
  v = Violations(R"({"model": {"gpt": {"vocabSize": "100"}}, "data": {"builtin": "fortunes"}})");
  EXPECT_NE(v["model.gpt.vocab_size"].find("byte-level"), std::string::npos);
  // A GPT needs token data, and token data a GPT.
  v = Violations(R"({"model": {"gpt": {}}})");
  EXPECT_EQ(v.count("data"), 1u);
  v = Violations(R"({"data": {"tokens": {"builtin": "fortunes"}}})");
  EXPECT_EQ(v.count("model"), 1u);
  v = Violations(R"({"model": {"mlp": {"activation": "ACTIVATION_GELU_TANH"}}})");
  EXPECT_EQ(v.count("model.mlp.activation"), 1u);
}

TEST(GptJobSpecTest, EveryBadTokenFieldIsNamed) {
  const std::string gpt = R"("model": {"gpt": {}}, )";
  auto v = Violations("{" + gpt + R"("data": {"tokens": {"builtin": "wikipedia"}}})");
  EXPECT_NE(v["data.tokens.builtin"].find("known: fortunes"), std::string::npos);
  v = Violations("{" + gpt + R"("data": {"tokens": {}}})");
  EXPECT_EQ(v.count("data.tokens"), 1u);
  v = Violations("{" + gpt + R"("data": {"tokens": {"text": "../etc/passwd"}}})");
  EXPECT_EQ(v.count("data.tokens.text"), 1u);
  v = Violations("{" + gpt + R"("data": {"tokens": {"shards": {"train": []}}}})");
  EXPECT_EQ(v.count("data.tokens.shards.train"), 1u);
  v = Violations(
      "{" + gpt +
      R"("data": {"tokens": {"shards": {"train": ["ok.bin", "/abs.bin"], "val": "../v.bin"},
                   "heldOutFraction": 0.1}}})");
  EXPECT_EQ(v.count("data.tokens.shards.train[1]"), 1u);
  EXPECT_EQ(v.count("data.tokens.shards.train[0]"), 0u);
  EXPECT_EQ(v.count("data.tokens.shards.val"), 1u);
  EXPECT_EQ(v.count("data.tokens.held_out_fraction"), 1u);  // shards have a val shard
  v = Violations(
      "{" + gpt +
      R"("data": {"tokens": {"text": "t.txt", "heldOutFraction": 1.0, "evalWindows": "-1"}}})");
  EXPECT_EQ(v.count("data.tokens.held_out_fraction"), 1u);
  EXPECT_EQ(v.count("data.tokens.eval_windows"), 1u);
  v = Violations("{" + gpt + R"("data": {"builtin": "imagenet"}})");
  EXPECT_NE(v["data.builtin"].find("fortunes"), std::string::npos);
}

TEST(GptJobSpecTest, TextIsByteTokensWithAHeldOutTail) {
  Write(Root() + "/text/t.txt", std::string(1000, 'a') + std::string(1000, 'b'));
  JobSpecContext context;
  context.data_root = Root();
  auto spec = Parse(R"({"model": {"gpt": {"blockSize": "8"}},
      "data": {"tokens": {"text": "text/t.txt", "heldOutFraction": 0.25, "evalWindows": "3"}}})");
  auto job = ResolveJobSpec(spec, context);
  ASSERT_TRUE(job.ok()) << job.status();
  auto data = LoadJobData(spec.data(), context, &job->config);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(data->tokens.has_value());
  ASSERT_EQ(data->tokens->train.size(), 1u);
  EXPECT_EQ(data->tokens->train[0].size(), 1500);
  ASSERT_TRUE(data->tokens->val.has_value());
  EXPECT_EQ(data->tokens->val->size(), 500);
  EXPECT_EQ((*data->tokens->val)[0], 'b');
  EXPECT_TRUE(data->tokens->byte_level);
  EXPECT_EQ(data->tokens->eval_windows, 3);
  const train::TokenData view = data->tokens->View();
  EXPECT_EQ(view.train[0], &data->tokens->train[0]);
  // A missing file names itself.
  spec = Parse(R"({"model": {"gpt": {}}, "data": {"tokens": {"text": "text/missing.txt"}}})");
  data = LoadJobData(spec.data(), context, &job->config);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("text/missing.txt"), std::string::npos);
}

TEST(GptJobSpecTest, ShardsLoadAndATokenOutsideTheVocabularyNamesFileAndOffset) {
  std::vector<uint16_t> ids(300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(i % 50);
  Write(Root() + "/shards/train_000.bin",
        data::EncodeTokenShard(data::TokenSequence::FromU16(ids)));
  Write(Root() + "/shards/val.bin", data::EncodeTokenShard(data::TokenSequence::FromU16(ids)));
  ids[7] = 60;  // >= vocab_size 50
  Write(Root() + "/shards/bad.bin", data::EncodeTokenShard(data::TokenSequence::FromU16(ids)));
  JobSpecContext context;
  context.data_root = Root();
  auto spec = Parse(R"({"model": {"gpt": {"vocabSize": "50", "blockSize": "16"}},
      "data": {"tokens": {"shards": {"train": ["shards/train_000.bin"], "val": "shards/val.bin"}}}})");
  auto job = ResolveJobSpec(spec, context);
  ASSERT_TRUE(job.ok()) << job.status();
  auto data = LoadJobData(spec.data(), context, &job->config);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->tokens->train[0].size(), 300);
  EXPECT_FALSE(data->tokens->byte_level);
  EXPECT_EQ(data->tokens->eval_windows, 256);  // the default
  spec.mutable_data()->mutable_tokens()->mutable_shards()->add_train("shards/bad.bin");
  data = LoadJobData(spec.data(), context, &job->config);
  ASSERT_FALSE(data.ok());
  const std::string msg(data.status().message());
  EXPECT_NE(msg.find("bad.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(1024 + 7 * 2)), std::string::npos) << msg;  // its byte
  // The paths the server confines.
  const auto paths = runner::DataPaths(spec.data());
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(paths[1].first, "data.tokens.shards.train[1]");
  EXPECT_EQ(paths[2].first, "data.tokens.shards.val");
}

TEST(GptJobSpecTest, FortunesIsTheBuiltInCorpus) {
  auto spec = Parse(R"({"model": {"gpt": {}}, "data": {"tokens": {"builtin": "fortunes"}}})");
  auto job = ResolveJobSpec(spec, {});
  ASSERT_TRUE(job.ok());
  auto data = LoadJobData(spec.data(), {}, &job->config);
  ASSERT_TRUE(data.ok()) << data.status();
  const int64_t total = data->tokens->train[0].size() + data->tokens->val->size();
  EXPECT_GT(total, 2000000);  // about 2.6 MB of text
  EXPECT_NEAR(static_cast<double>(data->tokens->val->size()) / total, 0.1, 1e-3);
}

TEST(GptExplainTest, EveryOpOfAGptWithItsDtypesAndBytes) {
  GptSpec g;
  g.block_size = 32;
  g.n_layer = 2;
  g.n_head = 2;
  g.n_embd = 64;
  auto plan = ExplainPrecision(g, *ResolvePrecision("bf16-mixed"), OptimizerSpec(), 8);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->parameter_count, nn::GptParameterCount(g));
  std::map<std::string, int> count;
  for (const ops::PlanEntry& e : plan->ops) {
    ++count[e.op];
    if (e.op == "linear" || e.op == "scaled_dot_product_attention") {
      EXPECT_EQ(e.compute_dtype, DType::kBF16) << e.op << " " << e.layer;
    }
    if (e.op == "layer_norm") {
      EXPECT_EQ(e.compute_dtype, DType::kF32) << e.layer;
    }
    if (e.op == "scaled_dot_product_attention") {
      // [batch * block, n_embd] in bf16 at batch 8: no T x T matrix.
      EXPECT_EQ(e.output_bytes, 8 * 32 * 64 * 2) << e.layer;
    }
    if (e.op == "lm_head_cross_entropy") {
      EXPECT_EQ(e.output_dtype, DType::kF32);
    }
  }
  EXPECT_EQ(count["scaled_dot_product_attention"], 2);
  EXPECT_EQ(count["linear"], 8);
  EXPECT_EQ(count["layer_norm"], 5);
  EXPECT_EQ(count["gelu_tanh"], 2);
  EXPECT_EQ(count["embedding"], 2);
  EXPECT_EQ(count["lm_head_cross_entropy"], 1);
  EXPECT_EQ(count["dropout"], 0);  // dropout 0: none
  // The plan is the training forward's: with dropout, nanoGPT's embedding
  // and residual dropouts (1 + 2 a block), pass-through as in torch.autocast.
  GptSpec dropped = g;
  dropped.dropout = 0.1;
  auto with_dropout =
      ExplainPrecision(dropped, *ResolvePrecision("bf16-mixed"), OptimizerSpec(), 8);
  ASSERT_TRUE(with_dropout.ok()) << with_dropout.status();
  int dropouts = 0;
  for (const ops::PlanEntry& e : with_dropout->ops) {
    if (e.op != "dropout") continue;
    ++dropouts;
    EXPECT_EQ(e.policy, ops::CastPolicy::kPassThrough);
  }
  EXPECT_EQ(dropouts, 1 + 2 * 2);
  // Activations scale with the context.
  GptSpec longer = g;
  longer.block_size = 64;
  auto plan2 = ExplainPrecision(longer, *ResolvePrecision("bf16-mixed"), OptimizerSpec(), 8);
  ASSERT_TRUE(plan2.ok());
  EXPECT_GT(plan2->memory.activation_bytes, plan->memory.activation_bytes);
}

TEST(GptExplainTest, TheOptimizerLineShowsTheWeightDecayGroups) {
  GptSpec g;
  g.n_layer = 2;
  OptimizerSpec o;
  o.weight_decay = 0.1;
  const std::string line = train::DescribeOptimizer(g, o);
  // 4 linear weights per block decay; wte, wpe, 8 biases/norms per block and
  // ln_f's two do not (the head is tied to wte).
  EXPECT_NE(line.find("AdamW lr 0.001, betas (0.9, 0.999), eps 1e-08"), std::string::npos) << line;
  EXPECT_NE(line.find("weight decay 0.1 on 8 tensors"), std::string::npos) << line;
  EXPECT_NE(line.find("none on 20 tensors"), std::string::npos) << line;
  EXPECT_NE(line.find("wte.weight, wpe.weight, h.*.ln_1.weight, h.*.ln_1.bias"), std::string::npos)
      << line;
  g.tie_embeddings = false;  // an untied head is a linear: it decays
  EXPECT_NE(train::DescribeOptimizer(g, o).find("on 9 tensors"), std::string::npos);
  nn::MlpSpec mlp;  // torch.optim's default: every parameter
  const std::string m = train::DescribeOptimizer(mlp, o);
  EXPECT_NE(m.find("weight decay 0.1 on 6 tensors"), std::string::npos) << m;
  EXPECT_EQ(m.find("none on"), std::string::npos) << m;
  o.weight_decay = 0;
  EXPECT_NE(train::DescribeOptimizer(g, o).find("no weight decay"), std::string::npos);
}

}  // namespace
}  // namespace ampd::engine

namespace ampd::engine {
namespace {

// precision.fp8: the FP8 modes by name, the recipe's fields over a base's,
// and every bad one named (with the rest of the spec's violations).
TEST(Fp8JobSpecTest, TheModesAndTheRecipeFieldsResolve) {
  for (const char* name :
       {"fp8-hybrid", "transformer-engine", "fp8-current", "transformer-engine-float16"}) {
    auto job =
        ResolveJobSpec(Parse(absl::StrCat(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
                               "precision": {"profile": ")",
                                          name, R"("}})")),
                       {});
    ASSERT_TRUE(job.ok()) << name << ": " << job.status();
    EXPECT_TRUE(job->config.precision.fp8) << name;
  }
  auto job = ResolveJobSpec(Parse(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
      "precision": {"custom": {"base": "fp8-hybrid",
        "fp8": {"margin": 2, "amaxHistoryLen": 16, "amaxComputeAlgo": "AMAX_ALGO_MOST_RECENT",
                "format": "FORMAT_E4M3"}}}})"),
                            {});
  ASSERT_TRUE(job.ok()) << job.status();
  const backend::Fp8Recipe& r = job->config.precision.fp8_recipe;
  EXPECT_EQ(r.margin, 2.0f);
  EXPECT_EQ(r.amax_history_len, 16);
  EXPECT_EQ(r.amax_compute_algo, backend::AmaxAlgo::kMostRecent);
  EXPECT_EQ(r.format, backend::Fp8FormatRecipe::kE4M3);
  // FP8 on top of bf16-mixed, and off again on an fp8 base.
  job = ResolveJobSpec(Parse(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
      "precision": {"custom": {"base": "bf16-mixed", "fp8": {"scaling": "SCALING_CURRENT"}}}})"),
                       {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->config.precision.fp8);
  EXPECT_EQ(job->config.precision.fp8_recipe.kind, backend::Fp8ScalingKind::kCurrent);
  job = ResolveJobSpec(Parse(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
      "precision": {"custom": {"base": "fp8-hybrid", "fp8": {"enabled": false}}}})"),
                       {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->config.precision.fp8);
}

TEST(Fp8JobSpecTest, EveryBadFp8FieldIsNamed) {
  auto v = Violations(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
      "training": {"batchSize": 0},
      "precision": {"custom": {"base": "fp8-hybrid", "fp8": {"margin": -1}}}})");
  EXPECT_EQ(v.count("training.batch_size"), 1u);
  EXPECT_EQ(v.count("precision.custom.fp8.margin"), 1u) << ::testing::PrintToString(v);
  v = Violations(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
      "precision": {"custom": {"base": "fp8-hybrid", "fp8": {"amaxHistoryLen": 0}}}})");
  EXPECT_EQ(v.count("precision.custom.fp8.amax_history_len"), 1u) << ::testing::PrintToString(v);
  v = Violations(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
      "precision": {"custom": {"base": "fp8-current", "fp8": {"amaxHistoryLen": 8}}}})");
  EXPECT_NE(v["precision.custom.fp8.amax_history_len"].find("current scaling keeps no history"),
            std::string::npos);
  v = Violations(R"({"model": {"gpt": {}}, "data": {"builtin": "fortunes"},
      "precision": {"custom": {"base": "32-true", "fp8": {}}}})");
  EXPECT_NE(v["precision.custom.fp8"].find("FP8 needs autocast"), std::string::npos)
      << ::testing::PrintToString(v);
  // An MLP has no block linears for FP8.
  auto job = ResolveJobSpec(Parse(R"({"precision": {"profile": "fp8-hybrid"}})"), {});
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("precision: precision fp8-hybrid runs a transformer's"),
            std::string::npos)
      << job.status();
}

}  // namespace
}  // namespace ampd::engine
