// An f16 run started at loss scale 2^24: it overflows, backs off, skips and
// counts steps, still converges, and its scale trajectory and growth tracker
// follow PyTorch's documented update rule (torch._amp_update_scale_), which the
// test replays on its own. Skipped steps do not advance the LR schedule.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/data/dataset.h"
#include "engine/optim/optimizer.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using amp::PrecisionConfig;
using amp::ResolvePrecision;
using amp::SkipEvent;
using backend::AmpUpdateScale;
using backend::GradScalerState;
using nn::MlpSpec;
using nn::Parameter;
using optim::OptimizerSpec;
using optim::ScheduledLearningRate;
using optim::ScheduleSpec;
using train::StepMetrics;
using train::Trainer;
using train::TrainerCallbacks;
using train::TrainerConfig;
using train::TrainResult;

namespace {

constexpr int64_t kSteps = 240;
constexpr int64_t kGrowthInterval = 20;
constexpr double kInitScale = 16777216.0;  // 2^24

// The first `n` examples of `all` (or the rest, from `n` on).
data::Dataset Slice(const data::Dataset& all, int64_t begin, int64_t end) {
  data::Dataset d;
  d.num_examples = end - begin;
  d.feature_dim = all.feature_dim;
  d.num_classes = all.num_classes;
  d.features.assign(all.features.begin() + begin * all.feature_dim,
                    all.features.begin() + end * all.feature_dim);
  d.labels.assign(all.labels.begin() + begin, all.labels.begin() + end);
  return d;
}

struct Record {
  StepMetrics metrics;
  float scale_after = 0;
  int64_t tracker_after = 0;
};

class Recorder : public TrainerCallbacks {
 public:
  Trainer* trainer = nullptr;
  std::vector<Record> steps;
  std::vector<SkipEvent> skips;

  void OnStep(const StepMetrics& m) override {
    steps.push_back({m, trainer->scaler().scale(), trainer->scaler().growth_tracker()});
  }
  void OnSkip(const SkipEvent& e) override { skips.push_back(e); }
};

// torch._amp_update_scale_, written out with the scale held as an f32 (as
// PyTorch's scale tensor is).
struct Replay {
  float scale;
  int64_t tracker = 0;
  void Update(bool found_inf, float growth, float backoff, int64_t interval) {
    if (found_inf) {
      scale = scale * backoff;
      tracker = 0;
      return;
    }
    if (tracker + 1 == interval) {
      const float grown = scale * growth;
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      ++tracker;
    }
  }
};

TEST(LossScaleTrajectoryTest, F16RunAt2To24BacksOffSkipsAndConverges) {
  data::SyntheticSpec spec;
  spec.num_examples = 3072;
  spec.feature_dim = 32;
  spec.num_classes = 4;
  spec.seed = 11;
  absl::StatusOr<data::Dataset> all = data::MakeSyntheticDataset(spec);
  ASSERT_TRUE(all.ok()) << all.status();
  const data::Dataset train = Slice(*all, 0, 2048);
  const data::Dataset test = Slice(*all, 2048, 3072);

  TrainerConfig config;
  MlpSpec mlp;
  mlp.input_dim = 32;
  mlp.hidden = {64};
  mlp.num_classes = 4;
  config.model = mlp;
  absl::StatusOr<PrecisionConfig> precision = ResolvePrecision("16-mixed");
  ASSERT_TRUE(precision.ok()) << precision.status();
  config.precision = *precision;
  config.precision.loss_scaling.init_scale = kInitScale;
  config.precision.loss_scaling.growth_interval = kGrowthInterval;
  config.optimizer.kind = OptimizerSpec::Kind::kAdamW;
  config.optimizer.lr = 1e-2;
  config.schedule.kind = ScheduleSpec::Kind::kWarmupCosine;
  config.schedule.warmup_steps = 10;
  config.schedule.min_lr_ratio = 0.1;
  config.training.steps = kSteps;
  config.training.batch_size = 64;
  config.training.seed = 3;

  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(config, &train, &test);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Trainer& t = **trainer;
  EXPECT_EQ(t.scaler().scale(), static_cast<float>(kInitScale));
  const double initial_loss = t.Evaluate(test).loss;

  Recorder rec;
  rec.trainer = &t;
  absl::StatusOr<TrainResult> result = t.Run(&rec);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(rec.steps.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(result->steps_completed, kSteps);

  // Early steps overflow f16 and are skipped.
  EXPECT_TRUE(rec.steps[0].metrics.skipped);
  EXPECT_TRUE(rec.steps[1].metrics.skipped);
  EXPECT_FALSE(std::isfinite(rec.steps[0].metrics.grad_norm));

  // Skips are counted and each one is reported as an event.
  int64_t skipped = 0;
  std::vector<int64_t> skipped_steps;
  for (const Record& r : rec.steps) {
    if (r.metrics.skipped) {
      ++skipped;
      skipped_steps.push_back(r.metrics.step);
    }
    EXPECT_EQ(r.metrics.skipped_total, skipped) << "step " << r.metrics.step;
  }
  EXPECT_GE(skipped, 3);
  EXPECT_LT(skipped, kSteps / 4);
  EXPECT_EQ(result->skipped_steps, skipped);
  ASSERT_EQ(rec.skips.size(), static_cast<size_t>(skipped));
  std::set<std::string> names;
  for (const Parameter& p : t.model().parameters()) names.insert(p.name);
  for (size_t i = 0; i < rec.skips.size(); ++i) {
    const SkipEvent& e = rec.skips[i];
    EXPECT_EQ(e.step, skipped_steps[i]);
    EXPECT_EQ(e.reason, "non-finite gradient");
    EXPECT_EQ(names.count(e.first_parameter), 1u) << e.first_parameter;
    const Record& r = rec.steps[e.step - 1];
    EXPECT_EQ(e.scale_before, r.metrics.loss_scale);
    EXPECT_EQ(e.scale_after, r.scale_after);
  }

  // The scale used at each step, the scale after it and the growth tracker
  // follow a step-by-step replay of PyTorch's rule.
  Replay replay{static_cast<float>(kInitScale)};
  int64_t growths = 0;
  for (const Record& r : rec.steps) {
    SCOPED_TRACE("step " + std::to_string(r.metrics.step));
    ASSERT_EQ(r.metrics.loss_scale, replay.scale);
    const float before = replay.scale;
    replay.Update(r.metrics.skipped, 2.0f, 0.5f, kGrowthInterval);
    growths += replay.scale > before;
    ASSERT_EQ(r.scale_after, replay.scale);
    ASSERT_EQ(r.tracker_after, replay.tracker);
  }
  EXPECT_GE(growths, 2) << "the run never exercised growth";
  EXPECT_LT(replay.scale, static_cast<float>(kInitScale));
  // The engine's pure AmpUpdateScale gives the same trajectory.
  GradScalerState state{kInitScale, 0};
  for (const Record& r : rec.steps) {
    state = AmpUpdateScale(state, r.metrics.skipped, 2.0, 0.5, kGrowthInterval);
    ASSERT_EQ(state.scale, r.scale_after);
    ASSERT_EQ(state.growth_tracker, r.tracker_after);
  }

  // Skipped steps do not consume learning rate: the schedule follows the
  // number of applied steps, so the step after a skip has the skip's lr.
  int64_t applied = 0;
  for (size_t i = 0; i < rec.steps.size(); ++i) {
    const StepMetrics& m = rec.steps[i].metrics;
    EXPECT_DOUBLE_EQ(m.lr,
                     ScheduledLearningRate(config.schedule, config.optimizer.lr, applied, kSteps))
        << "step " << m.step;
    if (i > 0 && rec.steps[i - 1].metrics.skipped) {
      EXPECT_EQ(m.lr, rec.steps[i - 1].metrics.lr) << "step " << m.step;
    }
    applied += !m.skipped;
  }
  EXPECT_EQ(t.optimizer().steps_taken(), kSteps - skipped);
  // The check has teeth: the lr does move with each applied step (warmup), so
  // a schedule driven by the step counter would disagree after the first skip.
  size_t first_applied = 0;
  while (rec.steps[first_applied].metrics.skipped) ++first_applied;
  ASSERT_LT(first_applied + 1, rec.steps.size());
  EXPECT_EQ(rec.steps[first_applied].metrics.lr, rec.steps[0].metrics.lr);
  EXPECT_GT(rec.steps[first_applied + 1].metrics.lr, rec.steps[first_applied].metrics.lr);

  // And it converges.
  ASSERT_TRUE(result->final_eval.has_value());
  std::printf("skipped %lld of %lld steps (at", static_cast<long long>(skipped),
              static_cast<long long>(kSteps));
  for (int64_t s : skipped_steps) std::printf(" %lld", static_cast<long long>(s));
  std::printf("), %lld growths, final scale %g, loss %.4f -> %.4f, accuracy %.3f\n",
              static_cast<long long>(growths), replay.scale, initial_loss, result->final_eval->loss,
              result->final_eval->accuracy);

  EXPECT_LT(result->final_eval->loss, 0.5 * initial_loss)
      << "initial " << initial_loss << " final " << result->final_eval->loss;
  EXPECT_GT(result->final_eval->accuracy, 0.85);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += rec.steps[i].metrics.loss;
    last += rec.steps[kSteps - 1 - i].metrics.loss;
  }
  EXPECT_LT(last, 0.5 * first);
}

}  // namespace
}  // namespace ampd::engine
