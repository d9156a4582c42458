// Data-parallel training (DDP's semantics) on the CPU step: 2 Gloo workers,
// threads of this process over loopback, against 1 worker with the same
// global batch (the equivalence bars), two 2-worker runs bitwise
// equal, every rank ending with the same weights and loss scale.

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/data/text_tokens.h"
#include "engine/dist/process_group.h"
#include "engine/nn/gpt.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::engine {
namespace {

using train::StepMetrics;
using train::Trainer;
using train::TrainerConfig;

const data::Dataset& Data() { return testing::NoisyLabelData(); }

TrainerConfig Config(const std::string& precision, int64_t steps) {
  TrainerConfig c;
  nn::MlpSpec mlp;
  mlp.input_dim = 32;
  mlp.hidden = {64, 64};
  mlp.num_classes = 4;
  c.model = mlp;
  absl::StatusOr<amp::PrecisionConfig> p = amp::ResolvePrecision(precision);
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) c.precision = *p;
  c.optimizer.kind = optim::OptimizerSpec::Kind::kAdamW;
  // Not larger: the two runs' rounding gap stays near 1e-7 for 150 steps,
  // then grows with the training's own sensitivity. At 3e-3 it reached
  // 1.8e-3 by step 200 on a Zen 5 (AVX-512 kernels; below 1e-3 on Zen 3);
  // at 1e-3 it stays near 3e-4 there.
  c.optimizer.lr = 1e-3;
  c.training.steps = steps;
  c.training.batch_size = 256;
  c.training.seed = 3;
  c.training.clip_norm = 1.0;  // clipping uses the global norm
  return c;
}

struct RunResult {
  std::vector<StepMetrics> steps;                       // rank 0's
  std::vector<std::vector<double>> scales;              // per rank, per step
  std::vector<std::vector<std::vector<float>>> params;  // per rank, per tensor
};

std::vector<std::vector<float>> Params(const Trainer& t) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, tensor] : t.SaveState().tensors) {
    if (name.rfind("param/", 0) == 0) out.push_back(tensor.ToFloats());
  }
  return out;
}

using CreateTrainer =
    std::function<absl::StatusOr<std::unique_ptr<Trainer>>(const TrainerConfig& config)>;

RunResult TrainWith(const TrainerConfig& base, const CreateTrainer& create, int workers,
                    int64_t steps) {
  RunResult run;
  run.scales.resize(workers);
  run.params.resize(workers);
  std::shared_ptr<dist::RendezvousStore> store = dist::InProcessStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<dist::ProcessGroup> group;
      TrainerConfig c = base;
      if (workers > 1) {
        dist::GlooOptions o;
        o.rank = r;
        o.size = workers;
        o.store = store;
        absl::StatusOr<std::unique_ptr<dist::ProcessGroup>> g = dist::ConnectGloo(o);
        ASSERT_TRUE(g.ok()) << g.status();
        group = *std::move(g);
        c.process_group = group.get();
      }
      absl::StatusOr<std::unique_ptr<Trainer>> t = create(c);
      ASSERT_TRUE(t.ok()) << t.status();
      for (int64_t s = 0; s < steps; ++s) {
        StepMetrics m = (*t)->RunStep();
        run.scales[r].push_back(m.loss_scale);
        if (r == 0) run.steps.push_back(m);
      }
      run.params[r] = Params(**t);
      // The ranks leave together: none closes its connections while a peer
      // may still be reading from them.
      if (group != nullptr) {
        EXPECT_TRUE(group->Barrier().ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return run;
}

RunResult Train(const std::string& precision, int workers, int64_t steps) {
  return TrainWith(
      Config(precision, steps),
      [](const TrainerConfig& c) { return Trainer::Create(c, &Data(), nullptr); }, workers, steps);
}

// A small GPT on byte-level text with structure to learn.
struct Corpus {
  data::TokenSequence train, val;
};
const Corpus& Text() {
  static const Corpus* corpus = [] {
    const char* words[] = {"the ", "cat ", "sat ", "on ",  "a ",
                           "mat ", "and ", "dog ", "ran ", "far\n"};
    std::string s;
    for (int i = 0; i < 3000; ++i) s += words[(i * 7 + i / 10) % 10];
    data::TokenSplit split = data::SplitHeldOut(data::ByteTokens(s, "words"), 0.1);
    return new Corpus{std::move(split.train), std::move(split.val)};
  }();
  return *corpus;
}

RunResult TrainGpt(const std::string& precision, int workers, int64_t steps) {
  TrainerConfig c = Config(precision, steps);
  nn::GptSpec g;
  g.vocab_size = 256;
  g.block_size = 16;
  g.n_layer = 2;
  g.n_head = 2;
  g.n_embd = 32;
  c.model = g;
  c.training.batch_size = 16;
  c.training.grad_accumulation = 2;  // reduced on the last micro-batch only
  return TrainWith(
      c,
      [](const TrainerConfig& config) {
        train::TokenData d;
        d.train = {&Text().train};
        d.val = &Text().val;
        d.byte_level = true;
        return Trainer::Create(config, d);
      },
      workers, steps);
}

double Rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

TEST(DdpTrainerTest, TwoWorkersTrainAsOneWithTheSameGlobalBatch32True) {
  const int64_t steps = 200;
  const RunResult one = Train("32-true", 1, steps);
  const RunResult two = Train("32-true", 2, steps);
  ASSERT_EQ(one.steps.size(), static_cast<size_t>(steps));
  ASSERT_EQ(two.steps.size(), static_cast<size_t>(steps));
  double worst20 = 0, worst = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const double d = Rel(two.steps[s].loss, one.steps[s].loss);
    if (s < 20) worst20 = std::max(worst20, d);
    worst = std::max(worst, d);
  }
  EXPECT_LE(worst20, 1e-5);
  EXPECT_LE(worst, 1e-3);
  EXPECT_LT(two.steps.back().loss, 0.7 * two.steps.front().loss);  // it learned
  // Every rank holds the same weights, bit for bit.
  EXPECT_EQ(two.params[0], two.params[1]);
  // The all-reduces ran (on the communication thread) and report how much
  // of their time the backward hid; one worker has none.
  for (const StepMetrics& m : two.steps) {
    // Each rank's own rate, gathered with the loss.
    ASSERT_EQ(m.worker_samples_per_s.size(), 2u);
    EXPECT_GT(m.worker_samples_per_s[0], 0);
    EXPECT_GT(m.worker_samples_per_s[1], 0);
    EXPECT_GT(m.allreduce_s, 0);
    EXPECT_GE(m.allreduce_hidden, 0);
    EXPECT_LE(m.allreduce_hidden, 1);
  }
  EXPECT_EQ(one.steps.back().allreduce_s, 0);
  EXPECT_TRUE(one.steps.back().worker_samples_per_s.empty());
  std::printf("32-true: worst relative loss gap %.3g (first 20 steps), %.3g (all %lld)\n", worst20,
              worst, static_cast<long long>(steps));
}

TEST(DdpTrainerTest, MixedPrecisionWorkersSkipTheSameStepsAndKeepOneLossScale) {
  for (const char* precision : {"bf16-mixed", "16-mixed"}) {
    const int64_t steps = 200;
    const RunResult one = Train(precision, 1, steps);
    const RunResult two = Train(precision, 2, steps);
    double worst = 0;
    for (int64_t s = 0; s < steps; ++s) {
      worst = std::max(worst, Rel(two.steps[s].loss, one.steps[s].loss));
      EXPECT_EQ(two.steps[s].skipped, one.steps[s].skipped) << precision << " step " << s + 1;
    }
    EXPECT_LE(worst, 2e-2) << precision;
    for (int64_t s = 0; s < steps; s += 20) {
      std::printf("%s step %lld: %.6f %.6f\n", precision, static_cast<long long>(s + 1),
                  one.steps[s].loss, two.steps[s].loss);
    }
    EXPECT_EQ(two.scales[0], two.scales[1]) << precision;
    EXPECT_EQ(two.params[0], two.params[1]) << precision;
  }
}

TEST(DdpTrainerTest, TwoRunsOfTheTwoWorkerJobAreBitwiseEqual) {
  const RunResult a = Train("bf16-mixed", 2, 30), b = Train("bf16-mixed", 2, 30);
  for (size_t s = 0; s < a.steps.size(); ++s) EXPECT_EQ(a.steps[s].loss, b.steps[s].loss) << s;
  EXPECT_EQ(a.params[0], b.params[0]);
}

TEST(DdpTrainerTest, ALanguageModelTrainsOnEachRanksWindowsAsOneWorkerWould) {
  const int64_t steps = 30;
  for (const char* precision : {"32-true", "bf16-mixed"}) {
    const RunResult one = TrainGpt(precision, 1, steps);
    const RunResult two = TrainGpt(precision, 2, steps);
    ASSERT_EQ(two.steps.size(), static_cast<size_t>(steps));
    double worst = 0;
    for (int64_t s = 0; s < steps; ++s) {
      worst = std::max(worst, Rel(two.steps[s].loss, one.steps[s].loss));
    }
    EXPECT_LE(worst, std::string(precision) == "32-true" ? 1e-5 : 2e-2) << precision;
    EXPECT_LT(two.steps.back().loss, 0.8 * two.steps.front().loss) << precision;
    EXPECT_EQ(two.params[0], two.params[1]) << precision;
    EXPECT_GT(two.steps.back().tokens_per_s, 0);
    std::printf("GPT %s: worst relative loss gap %.3g over %lld steps\n", precision, worst,
                static_cast<long long>(steps));
  }
}

TEST(DdpTrainerTest, AGlobalBatchTheWorkersCannotShareEquallyIsRefusedByName) {
  std::shared_ptr<dist::RendezvousStore> store = dist::InProcessStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      dist::GlooOptions o;
      o.rank = r;
      o.size = 2;
      o.store = store;
      absl::StatusOr<std::unique_ptr<dist::ProcessGroup>> g = dist::ConnectGloo(o);
      ASSERT_TRUE(g.ok()) << g.status();
      TrainerConfig c = Config("32-true", 1);
      c.training.batch_size = 255;
      c.process_group = g->get();
      absl::Status s = train::ValidateTrainerConfig(c);
      EXPECT_TRUE((*g)->Barrier().ok());
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
      EXPECT_NE(s.message().find("training.batch_size"), std::string::npos) << s;
      EXPECT_NE(s.message().find("2 workers"), std::string::npos) << s;
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace ampd::engine
