// 8-bit optimizer states (bitsandbytes' blockwise method) in the optimizer
// and the trainer: the step's math is the 32-bit step's (in bitsandbytes'
// form), the states are the 32-bit states within the quantization's bound,
// the memory is ~25 % of f32 states and matches the estimate, small tensors
// and chosen layers stay f32, checkpoints carry codes, absmax and maps, and a
// resumed run is bitwise identical.
#include "engine/backend/kernels/optimizer8bit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/kernel_registry.h"
#include "engine/backend/quant_map.h"
#include "engine/nn/model.h"
#include "engine/optim/optimizer.h"
#include "engine/train/explain.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/engine/fake_device_backend.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::engine {

using amp::ResolvePrecision;
using nn::MlpSpec;
using nn::Parameter;
using optim::Optimizer;
using optim::OptimizerSpec;
using train::Trainer;
using train::TrainerConfig;
using train::TrainerState;

namespace {

std::vector<Parameter> Params(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<double> w(rows * cols), b(rows);
  uint32_t x = seed;
  auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return (static_cast<double>(x >> 8) / (1 << 24) - 0.5);
  };
  for (double& v : w) v = next();
  for (double& v : b) v = next();
  std::vector<Parameter> p(2);
  p[0] = {"fc.weight", "fc", false, Tensor::FromDoubles(w, {rows, cols}, DType::kF32), true};
  p[1] = {"fc.bias", "fc", false, Tensor::FromDoubles(b, {rows}, DType::kF32), true};
  for (Parameter& q : p) q.value.set_requires_grad(true);
  return p;
}

void SetGrads(std::vector<Parameter>& params, uint32_t seed) {
  uint32_t x = seed;
  for (Parameter& p : params) {
    std::vector<double> g(p.value.numel());
    for (double& v : g) {
      x = x * 22695477u + 1u;
      v = (static_cast<double>(x >> 8) / (1 << 24) - 0.5) * 0.1;
    }
    p.value.set_grad(Tensor::FromDoubles(g, p.value.shape(), DType::kF32));
  }
}

std::map<std::string, Tensor> States(const Optimizer& o) {
  std::map<std::string, Tensor> m;
  for (const auto& [name, t] : o.StateTensors()) m[name] = t;
  return m;
}

OptimizerSpec AdamW(int bits) {
  OptimizerSpec s;
  s.lr = 1e-2;
  s.weight_decay = 0.1;
  s.state_bits = bits;
  return s;
}

TEST(Optimizer8bitTest, TheFirstStepEqualsThe32BitStepAndStatesStayWithinTheBound) {
  // 90 x 50 = 4500 elements (>= min_8bit_size 4096): 18 blocks, the last
  // one partial.
  std::vector<Parameter> p32 = Params(90, 50, 1), p8 = Params(90, 50, 1);
  Optimizer o32(AdamW(32), &p32, false), o8(AdamW(8), &p8, false);
  SetGrads(p32, 5);
  SetGrads(p8, 5);
  o32.CollectGradients();
  o8.CollectGradients();
  o32.Step(1e-2);
  o8.Step(1e-2);
  // From zero states the update reads the f32 moments before they are
  // quantized: the weights are the 32-bit step's up to the rounding of the
  // update's two forms (bitsandbytes' one division a value against torch's
  // two). The first step's update is about lr in size and each form rounds
  // it four times (half an ulp each, relative), so the two differ by at most
  // four ulps of lr plus an ulp of the weight.
  {
    const auto ulp = [](double x) {
      const float f = static_cast<float>(std::fabs(x));
      return static_cast<double>(std::nextafter(f, INFINITY) - f);
    };
    const std::vector<double> w8 = p8[0].value.ToDoubles(), w32 = p32[0].value.ToDoubles();
    ASSERT_EQ(w8.size(), w32.size());
    int differ = 0;
    for (size_t i = 0; i < w8.size(); ++i) {
      ASSERT_LE(std::fabs(w8[i] - w32[i]),
                ulp(std::max(std::fabs(w8[i]), std::fabs(w32[i]))) + 4 * ulp(AdamW(8).lr))
          << i;
      differ += w8[i] != w32[i];
    }
    // Most weights agree bit for bit (all but 152 of 4500 here): the two
    // forms are one update.
    EXPECT_LT(differ, static_cast<int>(w8.size()) / 10) << differ;
  }
  const auto s8 = States(o8), s32 = States(o32);
  ASSERT_TRUE(s8.count("exp_avg.codes/fc.weight"));
  EXPECT_EQ(s8.at("exp_avg.codes/fc.weight").dtype(), DType::kU8);
  EXPECT_EQ(s8.at("exp_avg.absmax/fc.weight").shape(), (std::vector<int64_t>{18}));
  // The bias (90 < 4096 elements) keeps f32 states.
  EXPECT_TRUE(s8.count("exp_avg/fc.bias"));
  EXPECT_FALSE(s8.count("exp_avg.codes/fc.bias"));
  EXPECT_TRUE(s8.count("quant_map/bnb-dynamic-signed-8bit"));
  EXPECT_TRUE(s8.count("quant_map/bnb-dynamic-unsigned-8bit"));
  // Dequantized states against the f32 ones, per block.
  for (const char* state : {"exp_avg", "exp_avg_sq"}) {
    const bool is_signed = std::string(state) == "exp_avg";
    const auto& map = is_signed ? backend::DynamicMap() : backend::UnsignedDynamicMap();
    const std::vector<double> codes = s8.at(std::string(state) + ".codes/fc.weight").ToDoubles();
    const std::vector<double> absmax = s8.at(std::string(state) + ".absmax/fc.weight").ToDoubles();
    const std::vector<double> ref = s32.at(std::string(state) + "/fc.weight").ToDoubles();
    for (size_t i = 0; i < ref.size(); ++i) {
      const double a = absmax[i / 256];
      const double got = map[static_cast<int>(codes[i])] * a;
      EXPECT_LE(std::fabs(got - ref[i]), (is_signed ? 0.45 / 64 : 0.45 / 128) * a * 1.0001)
          << state << " " << i;
    }
  }
  // Later steps follow the 32-bit trajectory closely.
  for (int step = 0; step < 20; ++step) {
    SetGrads(p32, 100 + step);
    SetGrads(p8, 100 + step);
    o32.CollectGradients();
    o8.CollectGradients();
    o32.Step(1e-2);
    o8.Step(1e-2);
  }
  const std::vector<double> a = p32[0].value.ToDoubles(), b = p8[0].value.ToDoubles();
  double diff = 0, moved = 0;
  const std::vector<double> start = Params(90, 50, 1)[0].value.ToDoubles();
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    moved = std::max(moved, std::fabs(a[i] - start[i]));
  }
  EXPECT_GT(moved, 0.1);          // the weights did move,
  EXPECT_LT(diff, 0.05 * moved);  // and 8-bit states moved them the same way
}

TEST(Optimizer8bitTest, MemoryIsAQuarterAndTheEstimateAgrees) {
  MlpSpec mlp;
  mlp.input_dim = 784;
  mlp.hidden = {1024, 1024};
  mlp.num_classes = 10;
  const auto precision = *ResolvePrecision("bf16-mixed");
  int64_t measured[2];
  for (int k = 0; k < 2; ++k) {
    OptimizerSpec spec = AdamW(k == 0 ? 32 : 8);
    auto model = nn::BuildModel(mlp, precision, 1);
    ASSERT_TRUE(model.ok());
    Optimizer o(spec, &(*model)->parameters(), precision.master_weights);
    measured[k] = o.state_bytes();
    const int64_t estimate = train::EstimateMemory(mlp, precision, spec, 128).optimizer_state_bytes;
    EXPECT_NEAR(static_cast<double>(estimate), static_cast<double>(measured[k]),
                0.01 * measured[k]);
  }
  EXPECT_LE(static_cast<double>(measured[1]), 0.27 * measured[0]);
  EXPECT_GE(static_cast<double>(measured[1]), 0.25 * measured[0]);
}

TEST(Optimizer8bitTest, ChosenLayersAndSmallTensorsKeepF32States) {
  std::vector<Parameter> p = Params(90, 50, 1);
  OptimizerSpec spec = AdamW(8);
  spec.fp32_state_layers = {"fc"};
  Optimizer keep(spec, &p, false);
  EXPECT_FALSE(keep.has_8bit_states());
  EXPECT_TRUE(States(keep).count("exp_avg/fc.weight"));
  spec.fp32_state_layers.clear();
  spec.min_8bit_size = 4501;  // the weight has 4500
  Optimizer small(spec, &p, false);
  EXPECT_FALSE(small.has_8bit_states());
  spec.min_8bit_size = 0;
  Optimizer all(spec, &p, false);
  EXPECT_TRUE(States(all).count("exp_avg.codes/fc.bias"));
  OptimizerSpec sgd;
  sgd.kind = OptimizerSpec::Kind::kSgd;
  sgd.momentum = 0.9;
  sgd.state_bits = 8;
  Optimizer s(sgd, &p, false);
  EXPECT_TRUE(States(s).count("momentum.codes/fc.weight"));
  EXPECT_TRUE(States(s).count("quant_map/bnb-dynamic-signed-8bit"));
  EXPECT_FALSE(States(s).count("quant_map/bnb-dynamic-unsigned-8bit"));
  OptimizerSpec bad = AdamW(4);
  EXPECT_NE(optim::ValidateOptimizerSpec(bad).message().find("optimizer.adamw.state_bits"),
            std::string::npos);
}

TEST(Optimizer8bitTest, StatesLoadBackAndAForeignMapIsRefused) {
  std::vector<Parameter> p = Params(90, 50, 1);
  Optimizer o(AdamW(8), &p, false);
  SetGrads(p, 3);
  o.CollectGradients();
  o.Step(1e-2);
  std::vector<std::pair<std::string, Tensor>> saved;
  for (const auto& [name, t] : o.StateTensors()) saved.emplace_back(name, t.Clone());
  std::vector<Parameter> q = Params(90, 50, 1);
  Optimizer r(AdamW(8), &q, false);
  ASSERT_TRUE(r.LoadState(saved, 1).ok());
  for (const auto& [name, t] : r.StateTensors()) {
    EXPECT_EQ(t.ToDoubles(), States(o).at(name).ToDoubles()) << name;
  }
  for (auto& [name, t] : saved) {
    if (name == "quant_map/bnb-dynamic-unsigned-8bit") {
      std::vector<double> v = t.ToDoubles();
      v[200] *= 1.001;
      t = Tensor::FromDoubles(v, {256}, DType::kF32);
    }
  }
  absl::Status s = r.LoadState(saved, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("quant_map/bnb-dynamic-unsigned-8bit"), std::string::npos) << s;
}

TrainerConfig MlpConfig(const std::string& precision, OptimizerSpec::Kind kind) {
  TrainerConfig c;
  MlpSpec mlp;
  mlp.input_dim = 24;
  mlp.hidden = {256, 64};
  mlp.num_classes = 5;
  mlp.dropout = 0.1;
  c.model = mlp;
  c.precision = *ResolvePrecision(precision);
  c.optimizer.kind = kind;
  c.optimizer.lr = kind == OptimizerSpec::Kind::kSgd ? 0.05 : 3e-3;
  c.optimizer.momentum = kind == OptimizerSpec::Kind::kSgd ? 0.9 : 0;
  c.optimizer.state_bits = 8;
  c.training.steps = 40;
  c.training.batch_size = 32;
  c.training.seed = 4;
  return c;
}

TEST(Optimizer8bitTest, AResumedRunIsBitwiseIdentical) {
  const data::Dataset& data = testing::SyntheticData(512, 24, 5, 9);
  for (const auto kind : {OptimizerSpec::Kind::kAdamW, OptimizerSpec::Kind::kSgd}) {
    for (const char* precision : {"32-true", "16-mixed"}) {
      SCOPED_TRACE(precision);
      const TrainerConfig c = MlpConfig(precision, kind);
      auto whole = Trainer::Create(c, &data, nullptr);
      ASSERT_TRUE(whole.ok()) << whole.status();
      ASSERT_TRUE((*whole)->optimizer().has_8bit_states());
      std::vector<double> full;
      for (int i = 0; i < 40; ++i) full.push_back((*whole)->RunStep().loss);
      auto first = Trainer::Create(c, &data, nullptr);
      for (int i = 0; i < 15; ++i) (*first)->RunStep();
      const TrainerState state = (*first)->SaveState();
      auto second = Trainer::Create(c, &data, nullptr);
      ASSERT_TRUE((*second)->LoadState(state).ok());
      for (int i = 15; i < 40; ++i) ASSERT_EQ((*second)->RunStep().loss, full[i]) << i;
      const TrainerState a = (*whole)->SaveState(), b = (*second)->SaveState();
      ASSERT_EQ(a.tensors.size(), b.tensors.size());
      for (size_t i = 0; i < a.tensors.size(); ++i) {
        EXPECT_EQ(a.tensors[i].second.ToDoubles(), b.tensors[i].second.ToDoubles())
            << a.tensors[i].first;
      }
    }
  }
}

TEST(Optimizer8bitTest, ANonFiniteGradientWithoutLossScalingFailsTheJob) {
  const data::Dataset& data = testing::SyntheticData(512, 24, 5, 9);
  TrainerConfig c = MlpConfig("32-true", OptimizerSpec::Kind::kAdamW);
  c.optimizer.lr = 1e30;  // the second step's gradients overflow
  auto t = Trainer::Create(c, &data, nullptr);
  ASSERT_TRUE(t.ok());
  auto result = (*t)->Run();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("8-bit optimizer states and no loss scaling"),
            std::string::npos)
      << result.status();
  // The states never saw it: every absmax is finite.
  for (const auto& [name, tensor] : (*t)->optimizer().StateTensors()) {
    for (double v : tensor.ToDoubles()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

// Without list kernel K the device refuses the job; with it back, accepts it.
template <typename K>
void ExpectTheListKernelIsNeeded(const TrainerConfig& c, const backend::Backend& device) {
  const typename K::Fn list = backend::Kernel<K>(Device::kCuda);
  backend::UnregisterKernel<K>(Device::kCuda);
  EXPECT_EQ(train::CheckKernels(c, device).code(), absl::StatusCode::kFailedPrecondition)
      << K::kName;
  backend::RegisterKernel<K>(Device::kCuda, list);
  EXPECT_TRUE(train::CheckKernels(c, device).ok()) << K::kName;
}

// A device runs 8-bit states when it has the 8-bit kernels (the fake device
// mirrors the CPU's; tests/engine/train:trainer_device_test runs them), and
// one without them refuses the job on the field that asked for them.
TEST(Optimizer8bitTest, ADeviceWithoutThe8BitKernelIsRefusedNamingTheField) {
  static testing::FakeDeviceBackend* fake = [] {
    auto* b = new testing::FakeDeviceBackend();
    backend::RegisterBackend(Device::kCuda, b);
    return b;
  }();
  TrainerConfig c = MlpConfig("bf16-mixed", OptimizerSpec::Kind::kAdamW);
  c.device = Device::kCuda;
  EXPECT_TRUE(train::CheckKernels(c, *fake).ok());
  // The fused step's list kernel is needed as well as the one-tensor kernel.
  ExpectTheListKernelIsNeeded<backend::AdamW8bitStepListKernel>(c, *fake);
  backend::UnregisterKernel<backend::AdamW8bitStepKernel>(Device::kCuda);
  absl::Status s = train::CheckKernels(c, *fake);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "optimizer.adamw.state_bits: the fake-cuda backend has no 8-bit optimizer step kernel");
  c.optimizer.state_bits = 32;
  EXPECT_TRUE(train::CheckKernels(c, *fake).ok());
  c.optimizer.kind = OptimizerSpec::Kind::kSgd;  // SGD's 8-bit kernel is still there
  c.optimizer.momentum = 0.9;
  c.optimizer.state_bits = 8;
  EXPECT_TRUE(train::CheckKernels(c, *fake).ok());
  ExpectTheListKernelIsNeeded<backend::Sgd8bitStepListKernel>(c, *fake);
  backend::UnregisterKernel<backend::Sgd8bitStepKernel>(Device::kCuda);
  EXPECT_NE(train::CheckKernels(c, *fake).message().find("optimizer.sgd.state_bits"),
            std::string::npos);
}

}  // namespace
}  // namespace ampd::engine
