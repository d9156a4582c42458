// A run saved mid-way and restored into a fresh trainer continues bitwise
// identically to an uninterrupted run: the basis of resumable checkpoints.
#include <cmath>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using amp::ResolvePrecision;
using nn::MlpSpec;
using nn::Parameter;
using optim::OptimizerSpec;
using optim::ScheduleSpec;
using train::StepMetrics;
using train::Trainer;
using train::TrainerCallbacks;
using train::TrainerConfig;
using train::TrainerState;

namespace {

TrainerConfig Config(const std::string& precision, OptimizerSpec::Kind kind) {
  TrainerConfig c;
  MlpSpec mlp;
  mlp.input_dim = 16;
  mlp.hidden = {32, 32};
  mlp.num_classes = 4;
  mlp.layer_norm = true;
  mlp.dropout = 0.1;
  c.model = mlp;
  c.precision = *ResolvePrecision(precision);
  c.precision.loss_scaling.growth_interval = 7;  // exercise the scaler's tracker
  c.optimizer.kind = kind;
  c.optimizer.lr = 0.01;
  c.optimizer.momentum = kind == OptimizerSpec::Kind::kSgd ? 0.9 : 0.0;
  c.schedule.kind = ScheduleSpec::Kind::kWarmupCosine;
  c.schedule.warmup_steps = 5;
  c.training.steps = 60;
  c.training.batch_size = 16;
  c.training.grad_accumulation = 2;
  c.training.seed = 11;
  return c;
}

// 1024 examples of 16 features in 4 classes (Config's model).
data::Dataset Data() {
  data::SyntheticSpec spec;
  spec.feature_dim = 16;
  spec.num_classes = 4;
  return *data::MakeSyntheticDataset(spec);
}

class Recorder : public TrainerCallbacks {
 public:
  void OnStep(const StepMetrics& m) override { losses.push_back(m.loss); }
  std::vector<double> losses;
};

std::vector<std::vector<uint8_t>> ParamBytes(Trainer& t) {
  std::vector<std::vector<uint8_t>> out;
  for (const Parameter& p : t.model().parameters()) {
    const uint8_t* b = static_cast<const uint8_t*>(p.value.raw());
    out.emplace_back(b, b + p.value.nbytes());
  }
  return out;
}

void CheckResumeIsExact(const std::string& precision, OptimizerSpec::Kind kind) {
  data::SyntheticSpec spec;
  spec.num_examples = 200;  // not a multiple of the batch: epochs wrap mid-run
  spec.feature_dim = 16;
  spec.num_classes = 4;
  data::Dataset data = *data::MakeSyntheticDataset(spec);
  const TrainerConfig config = Config(precision, kind);

  auto full = *Trainer::Create(config, &data, nullptr);
  Recorder all;
  for (int i = 0; i < 60; ++i) full->RunStep(&all);

  auto first = *Trainer::Create(config, &data, nullptr);
  Recorder part1;
  for (int i = 0; i < 23; ++i) first->RunStep(&part1);
  TrainerState state = first->SaveState();
  first.reset();  // nothing survives but the saved state

  auto resumed = *Trainer::Create(config, &data, nullptr);
  ASSERT_TRUE(resumed->LoadState(state).ok());
  EXPECT_EQ(resumed->steps_done(), 23);
  Recorder part2;
  for (int i = 23; i < 60; ++i) resumed->RunStep(&part2);

  std::vector<double> stitched = part1.losses;
  stitched.insert(stitched.end(), part2.losses.begin(), part2.losses.end());
  ASSERT_EQ(stitched.size(), all.losses.size());
  for (size_t i = 0; i < stitched.size(); ++i) {
    ASSERT_EQ(stitched[i], all.losses[i]) << precision << " step " << i + 1;
  }
  EXPECT_EQ(ParamBytes(*resumed), ParamBytes(*full)) << precision;
  EXPECT_EQ(resumed->scaler().scale(), full->scaler().scale());
  EXPECT_EQ(resumed->scaler().growth_tracker(), full->scaler().growth_tracker());
}

TEST(TrainerStateTest, ResumeIsBitwiseExactInEveryKindOfMode) {
  CheckResumeIsExact("32-true", OptimizerSpec::Kind::kAdamW);
  CheckResumeIsExact("16-mixed", OptimizerSpec::Kind::kAdamW);  // dynamic loss scaling
  CheckResumeIsExact("bf16-mixed", OptimizerSpec::Kind::kSgd);  // momentum buffers
  CheckResumeIsExact("O2", OptimizerSpec::Kind::kAdamW);        // f32 master weights
}

TEST(TrainerStateTest, StateCarriesTheOptimizerAndMasterTensors) {
  const data::Dataset data = Data();
  auto t = *Trainer::Create(Config("O2", OptimizerSpec::Kind::kAdamW), &data, nullptr);
  t->RunStep();
  TrainerState s = t->SaveState();
  int params = 0, masters = 0, moments = 0;
  for (const auto& [name, tensor] : s.tensors) {
    params += name.rfind("param/", 0) == 0;
    masters += name.rfind("master/", 0) == 0;
    moments += name.rfind("exp_avg", 0) == 0;
  }
  const int n = static_cast<int>(t->model().parameters().size());
  EXPECT_EQ(params, n);
  EXPECT_EQ(masters, n - 4);  // O2 keeps the two norms' weights and biases in f32
  EXPECT_EQ(moments, 2 * n);
}

TEST(TrainerStateTest, LoadRejectsAStateFromAnotherModel) {
  const data::Dataset data = Data();
  TrainerConfig small = Config("32-true", OptimizerSpec::Kind::kAdamW);
  TrainerConfig wide = small;
  std::get<MlpSpec>(wide.model).hidden = {64, 32};
  auto a = *Trainer::Create(small, &data, nullptr);
  auto b = *Trainer::Create(wide, &data, nullptr);
  absl::Status s = b->LoadState(a->SaveState());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("fc1.weight"), std::string::npos) << s;
  TrainerState beyond = a->SaveState();
  beyond.step = 1000;
  EXPECT_FALSE(a->LoadState(beyond).ok());
}

TEST(TrainerStateTest, LoadRefusesCountersOutsideTheRunNamingThem) {
  const data::Dataset data = Data();
  auto source = *Trainer::Create(Config("16-mixed", OptimizerSpec::Kind::kAdamW), &data, nullptr);
  for (int i = 0; i < 4; ++i) source->RunStep();
  const TrainerState good = source->SaveState();
  struct Case {
    const char* field;
    void (*spoil)(TrainerState*);
  };
  const Case cases[] = {
      {"skipped_total", [](TrainerState* s) { s->skipped_total = s->step + 1; }},
      {"skipped_total", [](TrainerState* s) { s->skipped_total = -1; }},
      {"optimizer_steps", [](TrainerState* s) { s->optimizer_steps = s->step + 1; }},
      {"optimizer_steps", [](TrainerState* s) { s->optimizer_steps = -1; }},
      {"data_epoch", [](TrainerState* s) { s->data_position.epoch = -3; }},
      {"data_index", [](TrainerState* s) { s->data_position.index = int64_t{1} << 62; }},
      {"data_windows", [](TrainerState* s) { s->token_windows = 7; }},  // a classifier has none
      {"loss_scale", [](TrainerState* s) { s->scaler.scale = 0; }},
      {"loss_scale", [](TrainerState* s) { s->scaler.scale = -2; }},
      {"loss_scale", [](TrainerState* s) { s->scaler.scale = std::nan(""); }},
      {"loss_scale", [](TrainerState* s) { s->scaler.scale = 1e300; }},
      {"growth_tracker", [](TrainerState* s) { s->scaler.growth_tracker = 8; }},  // interval 7
      {"growth_tracker", [](TrainerState* s) { s->scaler.growth_tracker = -1; }},
  };
  for (const Case& c : cases) {
    TrainerState bad = good;
    c.spoil(&bad);
    auto t = *Trainer::Create(Config("16-mixed", OptimizerSpec::Kind::kAdamW), &data, nullptr);
    absl::Status s = t->LoadState(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(std::string(s.message()).find(c.field), std::string::npos) << s;
    EXPECT_EQ(t->steps_done(), 0) << c.field;
  }
  auto t = *Trainer::Create(Config("16-mixed", OptimizerSpec::Kind::kAdamW), &data, nullptr);
  EXPECT_TRUE(t->LoadState(good).ok());
}

TEST(TrainerStateTest, ARefusedStateLeavesTheTrainerAsItWas) {
  const data::Dataset data = Data();
  const TrainerConfig config = Config("bf16-mixed", OptimizerSpec::Kind::kAdamW);
  auto source = *Trainer::Create(config, &data, nullptr);
  for (int i = 0; i < 3; ++i) source->RunStep();
  // The parameters fit; one optimizer moment has the wrong shape, which only
  // the optimizer can tell: nothing may have been copied by then.
  TrainerState bad = source->SaveState();
  bool spoiled = false;
  for (auto& [name, tensor] : bad.tensors) {
    if (name.rfind("exp_avg_sq/", 0) == 0) {
      tensor = core::Tensor::Zeros({3}, tensor.dtype());
      spoiled = true;
      break;
    }
  }
  ASSERT_TRUE(spoiled);
  auto t = *Trainer::Create(config, &data, nullptr);
  const auto before = ParamBytes(*t);
  absl::Status s = t->LoadState(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("exp_avg_sq/"), std::string::npos) << s;
  EXPECT_EQ(ParamBytes(*t), before) << "the parameters were restored from a refused state";
  EXPECT_NE(ParamBytes(*source), before);  // so the comparison above can fail
}

}  // namespace
}  // namespace ampd::engine
