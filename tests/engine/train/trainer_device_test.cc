// The trainer's device path (model on the device, unscale / skip / scale
// update on the device, one host read per step), driven through a fake device
// backend that runs the CPU kernels: it must reproduce the CPU path bit for
// bit, skipped steps included, and checkpoint to host tensors.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/backend/backend.h"
#include "engine/data/dataset.h"
#include "engine/data/text_tokens.h"
#include "engine/nn/gpt.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/engine/fake_device_backend.h"
#include "tests/engine/mlp_config.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::engine {

using amp::SkipEvent;
using backend::RegisterBackend;
using nn::Activation;
using nn::MlpSpec;
using optim::OptimizerSpec;
using train::StepMetrics;
using train::Trainer;
using train::TrainerCallbacks;
using train::TrainerConfig;
using train::TrainerState;

namespace {

testing::FakeDeviceBackend& Fake() {
  static testing::FakeDeviceBackend* fake = [] {
    auto* b = new testing::FakeDeviceBackend();
    RegisterBackend(Device::kCuda, b);
    return b;
  }();
  return *fake;
}

const data::Dataset& Data() { return testing::SyntheticData(512, 24, 5, 9); }

TrainerConfig Config(const std::string& precision, OptimizerSpec::Kind kind, Device device) {
  TrainerConfig c = testing::MlpTrainerConfig(24, {32, 16}, 5, precision, device);
  c.optimizer.kind = kind;
  c.optimizer.lr = kind == OptimizerSpec::Kind::kSgd ? 0.1 : 1e-2;
  c.optimizer.momentum = 0.9;
  c.training.steps = 30;
  c.training.batch_size = 32;
  c.training.seed = 3;
  return c;
}

struct TrainRun {
  std::vector<StepMetrics> steps;
  std::vector<SkipEvent> skips;
  TrainerState state;
};

class Recorder : public TrainerCallbacks {
 public:
  void OnSkip(const SkipEvent& e) override { skips.push_back(e); }
  std::vector<SkipEvent> skips;
};

TrainRun Train(const TrainerConfig& c, int steps) {
  TrainRun r;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return r;
  Recorder rec;
  for (int i = 0; i < steps; ++i) r.steps.push_back((*t)->RunStep(&rec));
  r.skips = rec.skips;
  r.state = (*t)->SaveState();
  return r;
}

void ExpectSameRun(const TrainRun& cpu, const TrainRun& dev) {
  ASSERT_EQ(cpu.steps.size(), dev.steps.size());
  for (size_t i = 0; i < cpu.steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(cpu.steps[i].loss, dev.steps[i].loss);
    EXPECT_EQ(cpu.steps[i].loss_scale, dev.steps[i].loss_scale);
    EXPECT_EQ(cpu.steps[i].skipped, dev.steps[i].skipped);
    EXPECT_EQ(cpu.steps[i].lr, dev.steps[i].lr);
    EXPECT_EQ(cpu.steps[i].epoch, dev.steps[i].epoch);
    // The device keeps the sum of squares in f32: equal to rounding, and
    // non-finite on the same steps.
    const double a = cpu.steps[i].grad_norm, b = dev.steps[i].grad_norm;
    EXPECT_EQ(std::isfinite(a), std::isfinite(b)) << a << " vs " << b;
    if (std::isfinite(a)) {
      EXPECT_NEAR(a, b, 1e-6 * std::max(1.0, a));
    }
  }
  ASSERT_EQ(cpu.skips.size(), dev.skips.size());
  for (size_t i = 0; i < cpu.skips.size(); ++i) {
    EXPECT_EQ(cpu.skips[i].step, dev.skips[i].step);
    EXPECT_EQ(cpu.skips[i].first_parameter, dev.skips[i].first_parameter);
    EXPECT_EQ(cpu.skips[i].scale_before, dev.skips[i].scale_before);
    EXPECT_EQ(cpu.skips[i].scale_after, dev.skips[i].scale_after);
  }
  EXPECT_EQ(cpu.state.scaler.scale, dev.state.scaler.scale);
  EXPECT_EQ(cpu.state.scaler.growth_tracker, dev.state.scaler.growth_tracker);
  EXPECT_EQ(cpu.state.optimizer_steps, dev.state.optimizer_steps);
  ASSERT_EQ(cpu.state.tensors.size(), dev.state.tensors.size());
  for (size_t i = 0; i < cpu.state.tensors.size(); ++i) {
    const auto& [name, a] = cpu.state.tensors[i];
    const auto& [dev_name, b] = dev.state.tensors[i];
    EXPECT_EQ(name, dev_name);
    // Checkpoints hold host tensors whatever device trained them.
    EXPECT_EQ(b.device(), Device::kCpu) << name;
    EXPECT_EQ(a.ToDoubles(), b.ToDoubles()) << name;
  }
}

class DevicePathTest
    : public ::testing::TestWithParam<std::tuple<std::string, OptimizerSpec::Kind>> {};

TEST_P(DevicePathTest, MatchesTheCpuPathBitForBit) {
  Fake();
  const auto& [precision, kind] = GetParam();
  TrainRun cpu = Train(Config(precision, kind, Device::kCpu), 30);
  TrainRun dev = Train(Config(precision, kind, Device::kCuda), 30);
  ExpectSameRun(cpu, dev);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, DevicePathTest,
    ::testing::Combine(::testing::Values("32-true", "bf16-mixed", "16-mixed", "bf16-true"),
                       ::testing::Values(OptimizerSpec::Kind::kAdamW, OptimizerSpec::Kind::kSgd)));

TEST(DevicePath, SkippedStepsAreDecidedOnTheDeviceAndMatchTheCpu) {
  Fake();
  // An absurd initial scale overflows f16 gradients: the scaler backs off
  // step by step, skipping each, exactly as on the CPU.
  auto config = [](Device d) {
    TrainerConfig c = Config("16-mixed", OptimizerSpec::Kind::kAdamW, d);
    c.precision.loss_scaling.init_scale = std::ldexp(1.0, 40);
    c.precision.loss_scaling.growth_interval = 4;
    return c;
  };
  TrainRun cpu = Train(config(Device::kCpu), 40);
  TrainRun dev = Train(config(Device::kCuda), 40);
  ASSERT_GE(cpu.skips.size(), 5u);
  ExpectSameRun(cpu, dev);
  EXPECT_FALSE(dev.skips[0].first_parameter.empty());
}

TEST(DevicePath, GradientAccumulationAndClippingMatchTheCpu) {
  Fake();
  // The next step's first micro-batch is prefetched; the others are not.
  auto config = [](Device d) {
    TrainerConfig c = Config("bf16-mixed", OptimizerSpec::Kind::kAdamW, d);
    c.training.grad_accumulation = 3;
    return c;
  };
  ExpectSameRun(Train(config(Device::kCpu), 12), Train(config(Device::kCuda), 12));
  // Clipping reads the norm on the device path (f32 there, f64 on the CPU), so
  // the runs agree closely rather than bit for bit.
  auto clipped = [](Device d) {
    TrainerConfig c = Config("32-true", OptimizerSpec::Kind::kSgd, d);
    c.training.clip_norm = 0.05;
    return c;
  };
  TrainRun cpu = Train(clipped(Device::kCpu), 20), dev = Train(clipped(Device::kCuda), 20);
  ASSERT_EQ(cpu.steps.size(), dev.steps.size());
  for (size_t i = 0; i < cpu.steps.size(); ++i) {
    EXPECT_NEAR(cpu.steps[i].loss, dev.steps[i].loss, 1e-5) << "step " << i + 1;
  }
}

// 8-bit optimizer states on the device path: the fused 8-bit steps skip on
// the device flag and write the model copy themselves, giving the CPU path's
// run bit for bit (losses, codes, absmax values), skip storms included, with
// one host wait per step.
TEST(DevicePath, EightBitStatesMatchTheCpuBitForBitAndSkipOnTheDevice) {
  testing::FakeDeviceBackend& fake = Fake();
  for (const OptimizerSpec::Kind kind : {OptimizerSpec::Kind::kAdamW, OptimizerSpec::Kind::kSgd}) {
    const bool adamw = kind == OptimizerSpec::Kind::kAdamW;
    for (const char* mode : {"bf16-mixed", "16-mixed", "32-true"}) {
      SCOPED_TRACE(std::string(adamw ? "adamw8bit " : "sgd8bit ") + mode);
      auto config = [&](Device d) {
        TrainerConfig c = Config(mode, kind, d);
        c.optimizer.state_bits = 8;
        c.optimizer.min_8bit_size = 0;  // these layers are small
        if (std::string(mode) == "16-mixed") {
          c.precision.loss_scaling.init_scale = std::ldexp(1.0, 40);  // skips first
          c.precision.loss_scaling.growth_interval = 4;
        }
        return c;
      };
      TrainRun cpu = Train(config(Device::kCpu), 20);
      fake.calls.clear();
      fake.trainer_reads = 0;
      TrainRun dev = Train(config(Device::kCuda), 20);
      ExpectSameRun(cpu, dev);
      // 10 tensors (3 linears' weights and biases, 2 LayerNorms' scales and
      // shifts) as one list a step: one launch on a GPU.
      EXPECT_EQ(fake.calls[adamw ? "adamw8bit_step_list" : "sgd8bit_step_list"], 20);
      EXPECT_EQ(fake.calls[adamw ? "adamw8bit_step" : "sgd8bit_step"], 0);
      EXPECT_EQ(fake.trainer_reads, 20);
      if (std::string(mode) == "16-mixed") {
        EXPECT_GE(dev.skips.size(), 5u);
      }
      bool has_codes = false;
      for (const auto& [name, t] : dev.state.tensors) has_codes |= t.dtype() == DType::kU8;
      EXPECT_TRUE(has_codes);
    }
  }
}

// Nothing else waits for the device during a step: no Item() or copy to the
// host in the forward or backward (the loss gradient, scaled on the device,
// is read by the cross-entropy backward where it is).
TEST(DevicePath, NoOtherHostWaitDuringSteps) {
  testing::FakeDeviceBackend& fake = Fake();
  for (const char* mode : {"16-mixed", "bf16-mixed", "32-true"}) {
    for (const bool clip : {false, true}) {
      TrainerConfig c = Config(mode, OptimizerSpec::Kind::kAdamW, Device::kCuda);
      c.training.clip_norm = clip ? 1e-3 : 0.0;  // small enough to clip every step
      absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), nullptr);
      ASSERT_TRUE(t.ok()) << t.status();
      fake.calls.clear();
      fake.downloads = 0;
      fake.trainer_reads = 0;
      for (int i = 0; i < 5; ++i) (*t)->RunStep();
      const std::string what = std::string(mode) + (clip ? " clipped" : "");
      EXPECT_EQ(fake.downloads, 0) << what;
      // The end-of-step read only: clipping's norm stays on the device.
      EXPECT_EQ(fake.trainer_reads, 5) << what;
      EXPECT_EQ(fake.calls["cross_entropy_backward"], 5) << what;
      EXPECT_EQ(fake.calls["ClipOnDevice"], clip ? 5 : 0) << what;
    }
  }
}

// A GPT on the device: the CPU path's losses bit for bit, and still one host
// wait per step (the fused attention and LM head read nothing back).
TEST(DevicePath, AGptMatchesTheCpuAndWaitsOncePerStep) {
  testing::FakeDeviceBackend& fake = Fake();
  std::string text;
  for (int i = 0; i < 400; ++i) text += "a quick brown fox " + std::to_string(i % 13) + "\n";
  const data::TokenSplit split = data::SplitHeldOut(data::ByteTokens(text), 0.1);
  train::TokenData tokens;
  tokens.train = {&split.train};
  tokens.val = &split.val;
  tokens.byte_level = true;
  tokens.eval_windows = 4;
  // A device with FP8 tensor cores runs the FP8 modes: casts, decodes and
  // the once-per-step scaling update all on the device, no host read added.
  backend::DeviceProperties hopper;
  hopper.name = "fake H200";
  hopper.major = 9;
  hopper.bf16 = hopper.f16 = hopper.fp8 = true;
  fake.devices = {hopper};
  for (const char* mode :
       {"bf16-mixed", "16-mixed", "fp8-hybrid", "fp8-current", "transformer-engine-float16"}) {
    SCOPED_TRACE(mode);
    std::vector<std::vector<double>> losses;
    std::vector<std::vector<double>> records;  // FP8: each device's scaling record
    for (Device device : {Device::kCpu, Device::kCuda}) {
      TrainerConfig c;
      nn::GptSpec g;
      g.block_size = 16;
      g.n_layer = 2;
      g.n_head = 2;
      g.n_embd = 32;
      g.dropout = 0.1;
      c.model = g;
      c.precision = *amp::ResolvePrecision(mode);
      c.optimizer.weight_decay = 0.1;
      c.training.steps = 6;
      c.training.batch_size = 4;
      c.training.grad_accumulation = 2;
      c.training.seed = 2;
      c.device = device;
      absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, tokens);
      ASSERT_TRUE(t.ok()) << t.status();
      fake.calls.clear();
      fake.downloads = 0;
      fake.trainer_reads = 0;
      losses.emplace_back();
      for (int i = 0; i < 6; ++i) losses.back().push_back((*t)->RunStep().loss);
      if (device == Device::kCuda) {
        EXPECT_EQ(fake.trainer_reads, 6);
        EXPECT_EQ(fake.downloads, 0);
        EXPECT_GT(fake.calls["causal_attention"], 0);
        if (c.precision.fp8) {
          EXPECT_GT(fake.calls["fp8_cast_transpose"], 0);  // casts, with the transposes
          EXPECT_GT(fake.calls["fp8_matmul"], 0);
          EXPECT_GT(fake.calls["fp8_update_scaling"], 0);
          // The state stayed on the device, and moved.
          const nn::Fp8State* fp8 = (*t)->model().fp8();
          ASSERT_NE(fp8, nullptr);
          EXPECT_EQ(fp8->scales.device(), Device::kCuda);
        }
      }
      if (c.precision.fp8) {
        // One step more (a record step: the run's last) with a listener:
        // its scaling record, read from the device, is the CPU's.
        struct Records : train::TrainerCallbacks {
          void OnFp8Scaling(const train::Fp8ScalingRecord& r) override { records.push_back(r); }
          std::vector<train::Fp8ScalingRecord> records;
        } rec;
        ASSERT_TRUE((*t)->LoadState((*t)->SaveState()).ok());  // state through the host
        records.emplace_back();
        c.training.steps = 7;
        absl::StatusOr<std::unique_ptr<Trainer>> u = Trainer::Create(c, tokens);
        ASSERT_TRUE(u.ok());
        ASSERT_TRUE((*u)->LoadState((*t)->SaveState()).ok());
        (*u)->RunStep(&rec);
        ASSERT_EQ(rec.records.size(), 1u);
        EXPECT_EQ(rec.records[0].step, 7);
        for (const train::Fp8TensorScale& s : rec.records[0].tensors) {
          records.back().push_back(s.scale);
          records.back().push_back(s.amax);
          records.back().push_back(static_cast<double>(s.saturated));
        }
      }
    }
    EXPECT_EQ(losses[0], losses[1]);
    if (!records.empty()) {
      ASSERT_EQ(records.size(), 2u);
      EXPECT_FALSE(records[0].empty());
      EXPECT_EQ(records[0], records[1]);
    }
  }
  fake.devices.clear();
}

// FP8 on a device without FP8 tensor cores is refused at creation, naming
// the precision; only the CPU runs it emulated.
TEST(DevicePath, AnFp8ModeOnADeviceWithoutFp8IsRefused) {
  testing::FakeDeviceBackend& fake = Fake();
  TrainerConfig c;
  nn::GptSpec g;
  g.block_size = 16;
  g.n_layer = 1;
  g.n_head = 2;
  g.n_embd = 32;
  c.model = g;
  c.precision = *amp::ResolvePrecision("fp8-hybrid");
  c.device = Device::kCuda;
  backend::DeviceProperties ampere;
  ampere.name = "fake A100";
  ampere.major = 8;
  ampere.bf16 = ampere.f16 = true;
  fake.devices = {ampere};
  absl::Status s = train::CheckKernels(c, fake);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "precision: precision fp8-hybrid needs FP8 tensor cores (compute capability 8.9 or "
            "later); fake A100 is 8.0. Use bf16-mixed there, or the CPU, where FP8 runs "
            "emulated");
  ampere.major = 9;  // a Hopper
  ampere.fp8 = true;
  fake.devices = {ampere};
  EXPECT_TRUE(train::CheckKernels(c, fake).ok());
  c.precision = *amp::ResolvePrecision("bf16-mixed");
  fake.devices.clear();
  EXPECT_TRUE(train::CheckKernels(c, fake).ok());  // no FP8 asked for
}

TEST(DevicePath, OneHostReadPerStepAndTheFusedKernels) {
  testing::FakeDeviceBackend& fake = Fake();
  fake.calls.clear();
  fake.trainer_reads = 0;
  TrainRun dev = Train(Config("bf16-mixed", OptimizerSpec::Kind::kAdamW, Device::kCuda), 10);
  ASSERT_EQ(dev.steps.size(), 10u);
  // 10 steps, then SaveState's reads go through CopyInto, not ReadScalars.
  EXPECT_EQ(fake.trainer_reads, 10);
  EXPECT_EQ(fake.calls["UnscaleAndCheckOnDevice"], 10);
  EXPECT_EQ(fake.calls["UpdateScaleOnDevice"], 0);  // bf16-mixed: no loss scaling
  EXPECT_EQ(fake.calls["AdamWStepFusedList"], 10);  // one list of parameters a step
  EXPECT_GT(fake.calls["AdamWStepFused"], 10);      // the reference: a call per parameter
  EXPECT_EQ(fake.calls["AdamWStep"], fake.calls["AdamWStepFused"]);  // via the reference
  fake.calls.clear();
  fake.trainer_reads = 0;
  Train(Config("16-mixed", OptimizerSpec::Kind::kSgd, Device::kCuda), 6);
  EXPECT_EQ(fake.trainer_reads, 6);
  EXPECT_EQ(fake.calls["UpdateScaleOnDevice"], 6);
  EXPECT_GT(fake.calls["SgdStepFused"], 0);
}

// The training set is copied to the device once and each batch is gathered
// there (only row indices cross the bus); above the size limit batches are
// uploaded one by one. Both are the CPU path bit for bit.
TEST(DevicePath, TheTrainingSetStaysOnTheDeviceAndBatchesAreGatheredThere) {
  testing::FakeDeviceBackend& fake = Fake();
  const int64_t batch_bytes = 32 * 24 * sizeof(float);
  const int64_t set_bytes = 512 * 24 * sizeof(float);
  TrainRun cpu = Train(Config("bf16-mixed", OptimizerSpec::Kind::kAdamW, Device::kCpu), 12);
  for (const bool resident : {true, false}) {
    TrainerConfig c = Config("bf16-mixed", OptimizerSpec::Kind::kAdamW, Device::kCuda);
    c.device_dataset_max_bytes = resident ? set_bytes : set_bytes - 1;
    fake.calls.clear();
    fake.uploaded_bytes = 0;
    absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), nullptr);
    ASSERT_TRUE(t.ok()) << t.status();
    const int64_t at_create = fake.uploaded_bytes;
    (*t)->RunStep();  // the first step also uploads the second's batch
    const int64_t after_first = fake.uploaded_bytes;
    for (int i = 1; i < 12; ++i) {
      EXPECT_EQ((*t)->RunStep().loss, cpu.steps[i].loss) << "step " << i + 1 << " " << resident;
    }
    const int64_t per_step = (fake.uploaded_bytes - after_first) / 11;
    if (resident) {
      EXPECT_GE(at_create, set_bytes);
      EXPECT_EQ(per_step, 0);
      EXPECT_EQ(fake.calls["embedding"], 13);  // 12 steps + the prefetched 13th batch
    } else {
      EXPECT_LT(at_create, set_bytes);
      EXPECT_EQ(per_step, batch_bytes);
      EXPECT_EQ(fake.calls["embedding"], 0);
    }
  }
}

TEST(DevicePath, ResumesFromAHostCheckpointExactly) {
  Fake();
  const TrainerConfig c = Config("16-mixed", OptimizerSpec::Kind::kAdamW, Device::kCuda);
  TrainRun whole = Train(c, 20);
  absl::StatusOr<std::unique_ptr<Trainer>> first = Trainer::Create(c, &Data(), nullptr);
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < 8; ++i) (*first)->RunStep();
  TrainerState mid = (*first)->SaveState();
  absl::StatusOr<std::unique_ptr<Trainer>> second = Trainer::Create(c, &Data(), nullptr);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->LoadState(mid).ok());
  for (int i = 8; i < 20; ++i) {
    EXPECT_EQ((*second)->RunStep().loss, whole.steps[i].loss) << "step " << i + 1;
  }
}

TEST(DevicePath, AJobWhoseOpHasNoKernelOnTheDeviceIsRefusedAtCreation) {
  Fake().missing = {OpId::kGelu};
  TrainerConfig gelu = Config("bf16-mixed", OptimizerSpec::Kind::kAdamW, Device::kCuda);
  std::get<MlpSpec>(gelu.model).activation = Activation::kGelu;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(gelu, &Data(), nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.status().message(), "device: op gelu has no CUDA kernel (fake-cuda backend)");

  // The same model on the CPU, and a ReLU model on the device, are accepted.
  TrainerConfig on_cpu = gelu;
  on_cpu.device = Device::kCpu;
  EXPECT_TRUE(Trainer::Create(on_cpu, &Data(), nullptr).ok());
  TrainerConfig relu = Config("bf16-mixed", OptimizerSpec::Kind::kAdamW, Device::kCuda);
  EXPECT_TRUE(Trainer::Create(relu, &Data(), nullptr).ok());

  // Every op a model runs is checked, not just its activation.
  Fake().missing = {OpId::kLayerNorm};
  std::get<MlpSpec>(relu.model).layer_norm = true;
  EXPECT_EQ(Trainer::Create(relu, &Data(), nullptr).status().message(),
            "device: op layer_norm has no CUDA kernel (fake-cuda backend)");
  Fake().missing = {OpId::kCrossEntropy};
  std::get<MlpSpec>(relu.model).layer_norm = false;
  EXPECT_EQ(Trainer::Create(relu, &Data(), nullptr).status().message(),
            "device: op cross_entropy has no CUDA kernel (fake-cuda backend)");
  Fake().missing.clear();
}

TEST(DevicePath, TensorsMoveBetweenHostAndDevice) {
  Fake();
  Tensor host = Tensor::FromVector({1.5f, -2.0f, 3.25f}, {3}, DType::kF32);
  Tensor dev = host.To(Device::kCuda);
  EXPECT_EQ(dev.device(), Device::kCuda);
  EXPECT_EQ(dev.ToFloats(), host.ToFloats());  // read back through the backend
  Tensor bf = Tensor::Zeros({3}, DType::kBF16, Device::kCuda);
  bf.CopyFrom(host);  // host -> device with rounding
  EXPECT_EQ(bf.ToFloats(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  Tensor back = dev.To(Device::kCpu);
  EXPECT_EQ(back.device(), Device::kCpu);
  EXPECT_EQ(back.ToFloats(), host.ToFloats());
  EXPECT_EQ(Tensor::Full({2}, DType::kF16, 0.5, Device::kCuda).ToFloats(),
            (std::vector<float>{0.5f, 0.5f}));
  Tensor copy = dev.Clone();
  EXPECT_EQ(copy.device(), Device::kCuda);
  EXPECT_NE(copy.raw(), dev.raw());
}

}  // namespace
}  // namespace ampd::engine
