// The training loop: determinism, gradient accumulation, clipping,
// cancellation, configuration errors, and the low-precision parameter modes.

#include "engine/train/trainer.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "engine/amp/precision.h"
#include "engine/core/half.h"
#include "engine/data/dataset.h"
#include "gtest/gtest.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::engine {

using amp::PrecisionConfig;
using amp::ResolvePrecision;
using amp::SkipEvent;
using core::F16BitsToF32;
using core::F32ToF16Bits;
using nn::MlpSpec;
using nn::Parameter;
using optim::OptimizerSpec;
using optim::ScheduleSpec;
using train::CancellationToken;
using train::StepMetrics;
using train::Trainer;
using train::TrainerCallbacks;
using train::TrainerConfig;
using train::TrainResult;
using train::ValidateTrainerConfig;

namespace {

const data::Dataset& Data() { return testing::SyntheticData(1024, 32, 4, 5); }

TrainerConfig Config(const std::string& precision, uint64_t seed = 1) {
  TrainerConfig c;
  MlpSpec mlp;
  mlp.input_dim = 32;
  mlp.hidden = {32, 32};
  mlp.num_classes = 4;
  c.model = mlp;
  absl::StatusOr<PrecisionConfig> p = ResolvePrecision(precision);
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) c.precision = *p;
  c.optimizer.kind = OptimizerSpec::Kind::kAdamW;
  c.optimizer.lr = 1e-2;
  c.training.steps = 40;
  c.training.batch_size = 32;
  c.training.seed = seed;
  return c;
}

std::unique_ptr<Trainer> Make(const TrainerConfig& c, const data::Dataset* test = nullptr) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), test);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

std::vector<double> Losses(const TrainerConfig& c, int steps) {
  std::unique_ptr<Trainer> t = Make(c);
  std::vector<double> losses;
  if (t == nullptr) return losses;
  for (int i = 0; i < steps; ++i) losses.push_back(t->RunStep().loss);
  return losses;
}

std::vector<std::vector<double>> Params(Trainer& t) {
  std::vector<std::vector<double>> out;
  for (const Parameter& p : t.model().parameters()) out.push_back(p.value.ToDoubles());
  return out;
}

double MaxAbsDiff(const std::vector<std::vector<double>>& a,
                  const std::vector<std::vector<double>>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < a[i].size(); ++j) m = std::max(m, std::abs(a[i][j] - b[i][j]));
  }
  return m;
}

void ExpectField(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), field + ":"))
      << "expected \"" << field << ":\" at the start of: " << s;
}

TEST(TrainerTest, SameSeedGivesBitwiseIdenticalLosses) {
  for (const char* mode : {"32-true", "bf16-mixed"}) {
    SCOPED_TRACE(mode);
    TrainerConfig c = Config(mode, 7);
    MlpSpec mlp = std::get<MlpSpec>(c.model);
    mlp.dropout = 0.1;  // the dropout masks must repeat too
    c.model = mlp;
    const std::vector<double> a = Losses(c, 12);
    const std::vector<double> b = Losses(c, 12);
    ASSERT_EQ(a.size(), 12u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i], b[i]) << "step " << i + 1;  // bitwise: no tolerance
      EXPECT_TRUE(std::isfinite(a[i]));
    }
    const std::vector<double> other = Losses(Config(mode, 8), 12);
    int differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += other[i] != a[i];
    EXPECT_GE(differ, 11) << "a different seed should change (almost) every loss";
  }
}

TEST(TrainerTest, GradientAccumulationMatchesOneLargeBatch) {
  // The batcher's permutation depends only on (seed, epoch), so 2 micro-batches
  // of 32 cover exactly the examples of one batch of 64.
  TrainerConfig big = Config("32-true", 3);
  big.optimizer.kind = OptimizerSpec::Kind::kSgd;
  big.optimizer.lr = 0.5;
  big.training.batch_size = 64;
  TrainerConfig accum = big;
  accum.training.batch_size = 32;
  accum.training.grad_accumulation = 2;
  TrainerConfig half = accum;  // one micro-batch of 32 only: the control
  half.training.grad_accumulation = 1;

  std::unique_ptr<Trainer> a = Make(big), b = Make(accum), c = Make(half);
  ASSERT_TRUE(a && b && c);
  const auto initial = Params(*a);
  ASSERT_EQ(MaxAbsDiff(initial, Params(*b)), 0.0);  // same seed, same init
  const StepMetrics ma = a->RunStep(), mb = b->RunStep();
  c->RunStep();
  EXPECT_NEAR(ma.loss, mb.loss, 1e-6);
  EXPECT_NEAR(ma.grad_norm, mb.grad_norm, 1e-5 * ma.grad_norm);
  const double update = MaxAbsDiff(initial, Params(*a));
  ASSERT_GT(update, 1e-3);
  EXPECT_LT(MaxAbsDiff(Params(*a), Params(*b)), 1e-5);
  // A single micro-batch of 32 does not match: the comparison is sensitive.
  EXPECT_GT(MaxAbsDiff(Params(*a), Params(*c)), 100 * MaxAbsDiff(Params(*a), Params(*b)));
  // Accumulation consumes two batches per optimizer step: 16 steps of 2 x 32
  // are one epoch of the 1024 examples, as are 16 steps of 64, but not of 32.
  StepMetrics la, lb, lc;
  for (int i = 1; i < 16; ++i) {
    la = a->RunStep();
    lb = b->RunStep();
    lc = c->RunStep();
  }
  EXPECT_EQ(la.epoch, 1);
  EXPECT_EQ(lb.epoch, 1);
  EXPECT_EQ(lc.epoch, 0);
}

TEST(TrainerTest, ClipNormReportsTheRawNormAndAppliesTheClippedUpdate) {
  TrainerConfig plain = Config("32-true", 4);
  plain.optimizer.kind = OptimizerSpec::Kind::kSgd;
  plain.optimizer.lr = 0.1;
  std::unique_ptr<Trainer> t0 = Make(plain);
  ASSERT_TRUE(t0);
  const auto initial = Params(*t0);
  const double norm = t0->RunStep().grad_norm;
  ASSERT_GT(norm, 0.0);

  const double clip = norm / 4;
  TrainerConfig clipped = plain;
  clipped.training.clip_norm = clip;
  std::unique_ptr<Trainer> t1 = Make(clipped);
  const StepMetrics m1 = t1->RunStep();
  EXPECT_NEAR(m1.grad_norm, norm, 1e-9 * norm);  // the norm before clipping
  EXPECT_GT(m1.grad_norm, clip);

  // The applied update is the clipped one: same as an unclipped step with the
  // learning rate scaled by clip / (norm + 1e-6) (torch's clip_grad_norm_).
  TrainerConfig scaled = plain;
  scaled.optimizer.lr = 0.1 * clip / (norm + 1e-6);
  std::unique_ptr<Trainer> t2 = Make(scaled);
  t2->RunStep();
  const auto p1 = Params(*t1);
  EXPECT_LT(MaxAbsDiff(p1, Params(*t2)), 1e-6);
  EXPECT_GT(MaxAbsDiff(p1, Params(*t0)), 1e-3);
  // And the update's norm is lr * clip.
  double sq = 0;
  for (size_t i = 0; i < p1.size(); ++i) {
    for (size_t j = 0; j < p1[i].size(); ++j) sq += std::pow(p1[i][j] - initial[i][j], 2);
  }
  EXPECT_NEAR(std::sqrt(sq), 0.1 * clip, 1e-3 * 0.1 * clip);

  // A clip above the norm changes nothing.
  TrainerConfig loose = plain;
  loose.training.clip_norm = norm * 2;
  std::unique_ptr<Trainer> t3 = Make(loose);
  t3->RunStep();
  EXPECT_EQ(MaxAbsDiff(Params(*t3), Params(*t0)), 0.0);
}

class CancelAt : public TrainerCallbacks {
 public:
  CancelAt(CancellationToken* token, int64_t step) : token_(token), step_(step) {}
  void OnStep(const StepMetrics& m) override {
    ++calls;
    if (m.step == step_) token_->Cancel();
  }
  int calls = 0;

 private:
  CancellationToken* token_;
  int64_t step_;
};

TEST(TrainerTest, CancellationStopsBeforeTheNextStep) {
  TrainerConfig c = Config("32-true");
  c.training.steps = 10;
  std::unique_ptr<Trainer> t = Make(c);
  ASSERT_TRUE(t);
  CancellationToken token;
  CancelAt cb(&token, 3);
  absl::StatusOr<TrainResult> r = t->Run(&cb, &token);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->cancelled);
  EXPECT_EQ(r->steps_completed, 3);
  EXPECT_EQ(cb.calls, 3);
  EXPECT_EQ(t->steps_done(), 3);
  EXPECT_EQ(r->last_step.step, 3);

  // Cancelled before starting: no step at all.
  std::unique_ptr<Trainer> u = Make(c);
  CancellationToken early;
  early.Cancel();
  absl::StatusOr<TrainResult> r2 = u->Run(nullptr, &early);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(r2->cancelled);
  EXPECT_EQ(r2->steps_completed, 0);

  // Not cancelled: runs to the end.
  std::unique_ptr<Trainer> v = Make(c);
  CancellationToken never;
  absl::StatusOr<TrainResult> r3 = v->Run(nullptr, &never);
  ASSERT_TRUE(r3.ok());
  EXPECT_FALSE(r3->cancelled);
  EXPECT_EQ(r3->steps_completed, 10);
}

TEST(TrainerTest, ValidationNamesTheField) {
  auto check = [](void (*mutate)(TrainerConfig&), const std::string& field) {
    TrainerConfig c = Config("32-true");
    mutate(c);
    SCOPED_TRACE(field);
    ExpectField(ValidateTrainerConfig(c), field);
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), nullptr);
    ASSERT_FALSE(t.ok());
    ExpectField(t.status(), field);
  };
  EXPECT_TRUE(ValidateTrainerConfig(Config("32-true")).ok());
  check([](TrainerConfig& c) { c.training.batch_size = 0; }, "training.batch_size");
  check([](TrainerConfig& c) { c.training.steps = -1; }, "training.steps");
  check(
      [](TrainerConfig& c) {
        c.training.steps = 0;
        c.training.epochs = 0;
      },
      "training.epochs");
  check([](TrainerConfig& c) { c.training.grad_accumulation = 0; }, "training.grad_accumulation");
  check([](TrainerConfig& c) { c.training.eval_interval = -1; }, "training.eval_interval");
  check([](TrainerConfig& c) { c.training.clip_norm = -1; }, "training.clip_norm");
  check([](TrainerConfig& c) { c.training.clip_norm = NAN; }, "training.clip_norm");
  check([](TrainerConfig& c) { c.schedule.warmup_steps = -5; }, "schedule.warmup_steps");
  check([](TrainerConfig& c) { c.optimizer.lr = 0; }, "optimizer.lr");
  check(
      [](TrainerConfig& c) {
        std::get<MlpSpec>(c.model).hidden = {32, -3};
      },
      "model.mlp.hidden[1]");
  check([](TrainerConfig& c) { std::get<MlpSpec>(c.model).num_classes = 1; },
        "model.mlp.num_classes");
  check([](TrainerConfig& c) { c.precision.master_weights = true; }, "precision.master_weights");
  check(
      [](TrainerConfig& c) {
        c.precision = *ResolvePrecision("16-mixed");
        c.precision.loss_scaling.growth_interval = 0;
      },
      "precision.loss_scaling.growth_interval");
}

TEST(TrainerTest, CreateChecksTheModelAgainstTheData) {
  TrainerConfig c = Config("32-true");
  std::get<MlpSpec>(c.model).input_dim = 16;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), nullptr);
  ASSERT_FALSE(t.ok());
  ExpectField(t.status(), "model.mlp.input_dim");
  EXPECT_TRUE(absl::StrContains(t.status().message(), "32")) << t.status();

  // A test set of another width is caught too.
  data::Dataset narrow = Data();
  narrow.feature_dim = 16;
  narrow.num_examples = 10;
  narrow.features.resize(160);
  narrow.labels.resize(10);
  t = Trainer::Create(Config("32-true"), &Data(), &narrow);
  ASSERT_FALSE(t.ok());
  ExpectField(t.status(), "model.mlp.input_dim");

  TrainerConfig few = Config("32-true");
  std::get<MlpSpec>(few.model).num_classes = 3;  // the data has 4
  t = Trainer::Create(few, &Data(), nullptr);
  ASSERT_FALSE(t.ok());
  ExpectField(t.status(), "model.mlp.num_classes");

  TrainerConfig huge = Config("32-true");
  huge.training.batch_size = 4096;  // more than the 1024 examples
  t = Trainer::Create(huge, &Data(), nullptr);
  ASSERT_FALSE(t.ok());
  ExpectField(t.status(), "training.batch_size");

  t = Trainer::Create(Config("32-true"), nullptr, nullptr);
  EXPECT_FALSE(t.ok());
}

class SkipLog : public TrainerCallbacks {
 public:
  void OnStep(const StepMetrics& m) override { steps.push_back(m); }
  void OnSkip(const SkipEvent& e) override { skips.push_back(e); }
  std::vector<StepMetrics> steps;
  std::vector<SkipEvent> skips;
};

TEST(TrainerTest, NonFiniteGradientsAreNeverAppliedWithoutAScaler) {
  // A NaN feature in every example: every gradient of fc1.weight (and, through
  // the activations, every later one) is NaN. 32-true has no loss scaler, yet
  // the step must be skipped and reported like a scaler's skip.
  data::Dataset poisoned = Data();
  for (int64_t i = 0; i < poisoned.num_examples; ++i) {
    poisoned.features[static_cast<size_t>(i * poisoned.feature_dim + 3)] = NAN;
  }
  TrainerConfig c = Config("32-true");
  c.schedule.kind = ScheduleSpec::Kind::kWarmupCosine;
  c.schedule.warmup_steps = 5;
  c.training.steps = 3;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &poisoned, nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  const auto before = Params(**t);
  SkipLog log;
  absl::StatusOr<TrainResult> r = (*t)->Run(&log);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->skipped_steps, 3);
  ASSERT_EQ(log.steps.size(), 3u);
  for (const StepMetrics& m : log.steps) {
    EXPECT_TRUE(m.skipped);
    EXPECT_DOUBLE_EQ(m.lr, 1e-2 / 5);  // the schedule stays at its first step
  }
  EXPECT_EQ((*t)->optimizer().steps_taken(), 0);
  EXPECT_EQ(MaxAbsDiff(before, Params(**t)), 0.0);
  ASSERT_EQ(log.skips.size(), 3u);
  for (size_t i = 0; i < log.skips.size(); ++i) {
    EXPECT_EQ(log.skips[i].step, static_cast<int64_t>(i + 1));
    EXPECT_EQ(log.skips[i].reason, "non-finite gradient");
    EXPECT_EQ(log.skips[i].first_parameter, "fc1.weight");
    EXPECT_EQ(log.skips[i].scale_before, 1.0);
  }
}

double Mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

TEST(TrainerTest, O2TrainsF16ParamsWithF32Masters) {
  TrainerConfig c = Config("O2", 2);
  std::get<MlpSpec>(c.model).layer_norm = true;  // O2 keeps norms in f32
  std::unique_ptr<Trainer> t = Make(c);
  ASSERT_TRUE(t);
  const std::vector<Parameter>& params = t->model().parameters();
  const std::vector<Tensor>& masters = t->optimizer().updated_weights();
  ASSERT_EQ(params.size(), masters.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].value.dtype(), params[i].is_norm ? DType::kF32 : DType::kF16)
        << params[i].name;
    EXPECT_EQ(masters[i].dtype(), DType::kF32) << params[i].name;
  }
  EXPECT_TRUE(t->scaler().enabled());
  std::vector<double> losses;
  for (int i = 0; i < 40; ++i) losses.push_back(t->RunStep().loss);
  for (double l : losses) ASSERT_TRUE(std::isfinite(l));
  EXPECT_LT(Mean(losses, 30, 40), 0.6 * Mean(losses, 0, 10));
  // The f16 model copy is the master rounded to f16.
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].is_norm) {
      EXPECT_EQ(masters[i].impl(), params[i].value.impl());
      continue;
    }
    const std::vector<float> m = masters[i].ToFloats(), p = params[i].value.ToFloats();
    for (size_t j = 0; j < m.size(); ++j) {
      ASSERT_EQ(p[j], F16BitsToF32(F32ToF16Bits(m[j]))) << params[i].name << "[" << j << "]";
    }
  }
}

TEST(TrainerTest, Bf16TrueTrains) {
  TrainerConfig c = Config("bf16-true", 2);
  std::unique_ptr<Trainer> t = Make(c);
  ASSERT_TRUE(t);
  for (const Parameter& p : t->model().parameters()) EXPECT_EQ(p.value.dtype(), DType::kBF16);
  EXPECT_FALSE(t->scaler().enabled());
  const std::vector<Tensor>& w = t->optimizer().updated_weights();
  EXPECT_EQ(w[0].impl(), t->model().parameters()[0].value.impl());  // no master copy
  std::vector<double> losses;
  for (int i = 0; i < 40; ++i) losses.push_back(t->RunStep().loss);
  for (double l : losses) ASSERT_TRUE(std::isfinite(l));
  EXPECT_LT(Mean(losses, 30, 40), 0.6 * Mean(losses, 0, 10));
}

TEST(TrainerTest, MixedModesTrainAndEvaluate) {
  data::Dataset test = Data();
  for (const char* mode : {"16-mixed", "bf16-mixed"}) {
    SCOPED_TRACE(mode);
    TrainerConfig c = Config(mode, 9);
    c.training.steps = 60;
    std::unique_ptr<Trainer> t = Make(c, &test);
    ASSERT_TRUE(t);
    const double before = t->Evaluate(test).loss;
    absl::StatusOr<TrainResult> r = t->Run();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->final_eval.has_value());
    EXPECT_EQ(r->final_eval->examples, 1024);
    EXPECT_LT(r->final_eval->loss, 0.6 * before);
    EXPECT_GT(r->final_eval->accuracy, 0.8);
    EXPECT_EQ(r->skipped_steps, 0);  // 2^16 is fine for this model
  }
}

}  // namespace
}  // namespace ampd::engine
