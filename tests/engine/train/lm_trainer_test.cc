// The trainer's language-model path: a GPT on token windows. It learns, its
// evaluations report val loss and bits per byte, its metrics carry tokens/s
// and MFU, and a run saved mid-way and restored into a fresh trainer
// continues bitwise identically (the window position is in the state).
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/data/text_tokens.h"
#include "engine/nn/gpt.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using amp::ResolvePrecision;
using data::ByteTokens;
using data::TokenSequence;
using nn::GptSpec;
using nn::Parameter;
using optim::ScheduleSpec;
using train::EvalMetrics;
using train::StepMetrics;
using train::TokenData;
using train::Trainer;
using train::TrainerCallbacks;
using train::TrainerConfig;
using train::TrainerState;

namespace {

// A text with structure to learn: short English-like lines in a fixed order.
std::string Text() {
  const char* words[] = {"the ", "cat ", "sat ", "on ",  "a ",
                         "mat ", "and ", "dog ", "ran ", "far\n"};
  std::string s;
  for (int i = 0; i < 3000; ++i) s += words[(i * 7 + i / 10) % 10];
  return s;
}

TrainerConfig Config(const std::string& precision, double dropout = 0.0) {
  TrainerConfig c;
  GptSpec g;
  g.vocab_size = 256;
  g.block_size = 16;
  g.n_layer = 2;
  g.n_head = 2;
  g.n_embd = 32;
  g.dropout = dropout;
  c.model = g;
  c.precision = *ResolvePrecision(precision);
  c.optimizer.lr = 3e-3;
  c.optimizer.weight_decay = 0.1;
  c.schedule.kind = ScheduleSpec::Kind::kWarmupCosine;
  c.schedule.warmup_steps = 5;
  c.training.steps = 40;
  c.training.batch_size = 8;
  c.training.grad_accumulation = 2;
  c.training.eval_interval = 20;
  c.training.clip_norm = 1.0;
  c.training.seed = 5;
  return c;
}

struct Corpus {
  TokenSequence train, val;
  TokenData View(int64_t eval_windows = 16) const {
    TokenData d;
    d.train = {&train};
    d.val = &val;
    d.byte_level = true;
    d.eval_windows = eval_windows;
    return d;
  }
};

Corpus MakeCorpus() {
  data::TokenSplit split = data::SplitHeldOut(ByteTokens(Text(), "words"), 0.1);
  return {std::move(split.train), std::move(split.val)};
}

class Recorder : public TrainerCallbacks {
 public:
  void OnStep(const StepMetrics& m) override { steps.push_back(m); }
  void OnEval(const EvalMetrics& e) override { evals.push_back(e); }
  std::vector<StepMetrics> steps;
  std::vector<EvalMetrics> evals;
};

std::vector<std::vector<uint8_t>> ParamBytes(Trainer& t) {
  std::vector<std::vector<uint8_t>> out;
  for (const Parameter& p : t.model().parameters()) {
    const uint8_t* b = static_cast<const uint8_t*>(p.value.raw());
    out.emplace_back(b, b + p.value.nbytes());
  }
  return out;
}

TEST(LmTrainerTest, AGptLearnsAndItsEvalsReportValLossAndBitsPerByte) {
  const Corpus corpus = MakeCorpus();
  TrainerConfig c = Config("bf16-mixed");
  c.training.steps = 150;
  c.training.eval_interval = 75;
  auto t = Trainer::Create(c, corpus.View());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_NE((*t)->model().AsLanguageModel(), nullptr);
  const EvalMetrics before = (*t)->EvaluateTokens();
  Recorder rec;
  auto result = (*t)->Run(&rec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps_completed, 150);
  ASSERT_EQ(rec.evals.size(), 2u);  // at steps 75 and 150
  EXPECT_EQ(rec.evals[0].step, 75);
  const EvalMetrics& last = rec.evals.back();
  EXPECT_EQ(last.examples, 16);
  EXPECT_EQ(last.tokens, 16 * 16);
  EXPECT_DOUBLE_EQ(last.bits_per_byte, last.loss / std::log(2.0));
  // From uniform over 256 bytes (ln 256 = 5.55) to below the text's
  // character entropy without context (2.36 nats): it uses the context.
  EXPECT_GT(before.loss, 5.0);
  EXPECT_LT(last.loss, 2.0);
  EXPECT_LT(rec.steps.back().loss, rec.steps.front().loss);
}

TEST(LmTrainerTest, StepMetricsCarryTokensPerSecondAndMfuAgainstThePeak) {
  const Corpus corpus = MakeCorpus();
  TrainerConfig c = Config("32-true");
  c.peak_flops = 1e9;
  auto t = Trainer::Create(c, corpus.View());
  ASSERT_TRUE(t.ok()) << t.status();
  const StepMetrics m = (*t)->RunStep();
  const GptSpec& g = std::get<GptSpec>(c.model);
  ASSERT_GT(m.samples_per_s, 0);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, m.samples_per_s * g.block_size);
  EXPECT_DOUBLE_EQ(m.mfu, m.tokens_per_s * nn::GptFlopsPerToken(g) / 1e9);
  // Without a given peak the CPU backend's measured bf16 GEMM rate is used
  // (measured once per process; under other tests' load it can be low enough
  // that a step's rate exceeds it, so the test checks the rate used, not < 1).
  c.peak_flops = 0;
  auto u = Trainer::Create(c, corpus.View());
  ASSERT_TRUE(u.ok());
  const StepMetrics n = (*u)->RunStep();
  absl::StatusOr<backend::Backend*> cpu = backend::BackendFor(Device::kCpu);
  ASSERT_TRUE(cpu.ok());
  const double peak = (*cpu)->PeakFlops();
  ASSERT_GT(peak, 0);
  EXPECT_GT(n.mfu, 0);
  EXPECT_DOUBLE_EQ(n.mfu, n.tokens_per_s * nn::GptFlopsPerToken(g) / peak);
}

// Every precision's run restored from a mid-way state continues bitwise
// identically: the same windows (the position is saved), the same dropout
// masks, the same optimizer and scaler state.
TEST(LmTrainerTest, AResumedRunIsBitwiseIdenticalToAnUninterruptedOne) {
  const Corpus corpus = MakeCorpus();
  // The FP8 modes' every amax history and scale is in the state too.
  for (const char* precision : {"32-true", "bf16-mixed", "16-mixed", "fp8-hybrid", "fp8-current",
                                "transformer-engine-float16"}) {
    SCOPED_TRACE(precision);
    const TrainerConfig c = Config(precision, /*dropout=*/0.1);
    auto whole = Trainer::Create(c, corpus.View());
    ASSERT_TRUE(whole.ok()) << whole.status();
    Recorder full;
    ASSERT_TRUE((*whole)->Run(&full).ok());

    auto first = Trainer::Create(c, corpus.View());
    ASSERT_TRUE(first.ok());
    Recorder head;
    for (int i = 0; i < 17; ++i) (*first)->RunStep(&head);
    const TrainerState state = (*first)->SaveState();
    EXPECT_EQ(state.token_windows, 17 * 8 * 2);  // batch 8, 2 micro-batches per step

    auto second = Trainer::Create(c, corpus.View());
    ASSERT_TRUE(second.ok());
    ASSERT_TRUE((*second)->LoadState(state).ok());
    Recorder tail;
    ASSERT_TRUE((*second)->Run(&tail).ok());
    ASSERT_EQ(head.steps.size() + tail.steps.size(), full.steps.size());
    for (size_t i = 0; i < full.steps.size(); ++i) {
      const double got =
          i < head.steps.size() ? head.steps[i].loss : tail.steps[i - head.steps.size()].loss;
      ASSERT_EQ(got, full.steps[i].loss) << "step " << i + 1;
    }
    EXPECT_EQ(ParamBytes(**second), ParamBytes(**whole));
    ASSERT_EQ(tail.evals.size(), 2u);
    EXPECT_EQ(tail.evals.back().loss, full.evals.back().loss);
  }
}

TEST(LmTrainerTest, BadDataIsAClearErrorNamingTheField) {
  const Corpus corpus = MakeCorpus();
  // Validation tokens shorter than one window.
  const TokenSequence tiny_val = corpus.val.Slice(0, 10);
  TokenData d = corpus.View();
  d.val = &tiny_val;
  auto t = Trainer::Create(Config("32-true"), d);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("data.tokens"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("block_size + 1 = 17"), std::string::npos) << t.status();
  // A context longer than any shard.
  TrainerConfig c = Config("32-true");
  std::get<GptSpec>(c.model).block_size = 100000;
  t = Trainer::Create(c, corpus.View());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.gpt.block_size"), std::string::npos) << t.status();
  // A GPT given a classification set, and an MLP given tokens.
  data::Dataset examples;
  examples.num_examples = 100;
  examples.feature_dim = 4;
  examples.num_classes = 2;
  examples.features.assign(400, 0.f);
  examples.labels.assign(100, 0);
  t = Trainer::Create(Config("32-true"), &examples, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("data.tokens"), std::string::npos) << t.status();
  TrainerConfig mlp;
  t = Trainer::Create(mlp, corpus.View());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.gpt"), std::string::npos) << t.status();
  // No evaluations without validation tokens: the run still trains.
  d = corpus.View();
  d.val = nullptr;
  auto no_val = Trainer::Create(Config("32-true"), d);
  ASSERT_TRUE(no_val.ok()) << no_val.status();
  Recorder rec;
  ASSERT_TRUE((*no_val)->Run(&rec).ok());
  EXPECT_TRUE(rec.evals.empty());
  EXPECT_EQ(rec.steps.size(), 40u);
}

}  // namespace
}  // namespace ampd::engine
