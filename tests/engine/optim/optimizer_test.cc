// SGD and AdamW against torch.optim's update rules computed here in f64,
// master weights, learning-rate schedules and spec validation.

#include "engine/optim/optimizer.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/nn/model.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using core::BF16BitsToF32;
using core::F32ToBF16Bits;
using nn::Parameter;
using optim::Optimizer;
using optim::OptimizerSpec;
using optim::ScheduledLearningRate;
using optim::ScheduleSpec;
using optim::ValidateOptimizerSpec;

namespace {

constexpr int kSteps = 4;

const std::vector<double> kInit = {0.5, -1.25, 2.0, 0.03125, -0.75};

// A different gradient each step, with mixed signs and magnitudes.
std::vector<double> GradAt(int step) {
  std::vector<double> g;
  for (size_t i = 0; i < kInit.size(); ++i) {
    g.push_back(std::sin(1.7 * (step + 1) + 0.9 * i) * (i % 2 ? 0.1 : 2.0) + 0.05 * step);
  }
  return g;
}

std::vector<float> ToF(const std::vector<double>& v) { return {v.begin(), v.end()}; }

Parameter MakeParam(const std::vector<double>& v, DType dtype, const std::string& name = "w") {
  Parameter p;
  p.name = name;
  p.layer = "fc";
  p.value = Tensor::FromVector(ToF(v), {static_cast<int64_t>(v.size())}, dtype);
  p.value.set_requires_grad(true).set_name(name);
  return p;
}

void SetGrad(Parameter& p, const std::vector<double>& g) {
  p.value.set_grad(Tensor::FromVector(ToF(g), p.value.shape(), p.value.dtype()));
}

// Runs kSteps optimizer steps on one f32 parameter with lr `lr`.
std::vector<std::vector<float>> RunEngine(const OptimizerSpec& spec, double lr) {
  std::vector<Parameter> params = {MakeParam(kInit, DType::kF32)};
  Optimizer opt(spec, &params, /*master_weights=*/false);
  std::vector<std::vector<float>> trajectory;
  for (int s = 0; s < kSteps; ++s) {
    opt.ZeroGrad();
    SetGrad(params[0], GradAt(s));
    opt.CollectGradients();
    opt.Step(lr);
    trajectory.push_back(params[0].value.ToFloats());
  }
  EXPECT_EQ(opt.steps_taken(), kSteps);
  return trajectory;
}

// torch.optim.SGD, written out.
std::vector<std::vector<double>> RunSgdReference(const OptimizerSpec& spec, double lr) {
  std::vector<double> p = kInit, buf(kInit.size(), 0.0);
  std::vector<std::vector<double>> trajectory;
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<double> g = GradAt(s);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + spec.weight_decay * p[i];
      if (spec.momentum != 0) {
        buf[i] = s == 0 ? d : spec.momentum * buf[i] + d;
        d = spec.nesterov ? d + spec.momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
    trajectory.push_back(p);
  }
  return trajectory;
}

// torch.optim.AdamW, written out.
std::vector<std::vector<double>> RunAdamWReference(const OptimizerSpec& spec, double lr) {
  std::vector<double> p = kInit, m(kInit.size(), 0.0), v(kInit.size(), 0.0);
  std::vector<std::vector<double>> trajectory;
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<double> g = GradAt(s);
    const int t = s + 1;
    const double bc1 = 1 - std::pow(spec.beta1, t), bc2 = 1 - std::pow(spec.beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * spec.weight_decay;
      m[i] = spec.beta1 * m[i] + (1 - spec.beta1) * g[i];
      v[i] = spec.beta2 * v[i] + (1 - spec.beta2) * g[i] * g[i];
      const double m_hat = m[i] / bc1, v_hat = v[i] / bc2;
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + spec.eps);
    }
    trajectory.push_back(p);
  }
  return trajectory;
}

void ExpectTrajectoriesNear(const std::vector<std::vector<float>>& got,
                            const std::vector<std::vector<double>>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    for (size_t i = 0; i < got[s].size(); ++i) {
      EXPECT_NEAR(got[s][i], want[s][i], tol) << "step " << s + 1 << " element " << i;
    }
  }
}

OptimizerSpec Sgd(double momentum = 0, bool nesterov = false, double wd = 0) {
  OptimizerSpec s;
  s.kind = OptimizerSpec::Kind::kSgd;
  s.momentum = momentum;
  s.nesterov = nesterov;
  s.weight_decay = wd;
  return s;
}

TEST(OptimizerTest, SgdPlain) {
  const OptimizerSpec spec = Sgd();
  ExpectTrajectoriesNear(RunEngine(spec, 0.1), RunSgdReference(spec, 0.1), 2e-6);
}

TEST(OptimizerTest, SgdMomentumStartsTheBufferWithTheFirstGradient) {
  const OptimizerSpec spec = Sgd(0.9);
  const auto got = RunEngine(spec, 0.05);
  ExpectTrajectoriesNear(got, RunSgdReference(spec, 0.05), 2e-6);
  // Not a buffer started at zero (which would give (1 - 0.9) * g first).
  EXPECT_NEAR(got[0][0], kInit[0] - 0.05 * GradAt(0)[0], 1e-6);
}

TEST(OptimizerTest, SgdNesterov) {
  const OptimizerSpec spec = Sgd(0.8, true);
  const auto got = RunEngine(spec, 0.05);
  ExpectTrajectoriesNear(got, RunSgdReference(spec, 0.05), 2e-6);
  // And it differs from classical momentum.
  const auto classical = RunSgdReference(Sgd(0.8), 0.05);
  EXPECT_GT(std::abs(got[2][0] - classical[2][0]), 1e-3);
}

TEST(OptimizerTest, SgdWeightDecayWithMomentum) {
  const OptimizerSpec spec = Sgd(0.9, false, 0.1);
  ExpectTrajectoriesNear(RunEngine(spec, 0.1), RunSgdReference(spec, 0.1), 2e-6);
  const OptimizerSpec nesterov = Sgd(0.9, true, 0.05);
  ExpectTrajectoriesNear(RunEngine(nesterov, 0.1), RunSgdReference(nesterov, 0.1), 2e-6);
}

TEST(OptimizerTest, AdamWWithBiasCorrection) {
  OptimizerSpec spec;  // AdamW defaults: betas (0.9, 0.999), eps 1e-8
  spec.weight_decay = 0;
  ExpectTrajectoriesNear(RunEngine(spec, 0.01), RunAdamWReference(spec, 0.01), 2e-6);
  // Bias correction makes the first step lr * sign(g) (up to eps).
  const auto got = RunEngine(spec, 0.01);
  for (size_t i = 0; i < kInit.size(); ++i) {
    EXPECT_NEAR(got[0][i], kInit[i] - 0.01 * (GradAt(0)[i] > 0 ? 1 : -1), 1e-6);
  }
}

TEST(OptimizerTest, AdamWDecoupledWeightDecay) {
  OptimizerSpec spec;
  spec.weight_decay = 0.1;
  spec.beta1 = 0.8;
  spec.beta2 = 0.95;
  spec.eps = 1e-3;
  const auto got = RunEngine(spec, 0.05);
  ExpectTrajectoriesNear(got, RunAdamWReference(spec, 0.05), 2e-6);
  // Decoupled: differs from L2 decay added to the gradient by a visible amount.
  OptimizerSpec no_decay = spec;
  no_decay.weight_decay = 0;
  const auto plain = RunAdamWReference(no_decay, 0.05);
  EXPECT_GT(std::abs(got[kSteps - 1][2] - plain[kSteps - 1][2]), 1e-3);
}

TEST(OptimizerTest, MasterWeightsAreUpdatedInF32AndCopiedToBf16) {
  OptimizerSpec spec = Sgd(0.9);
  std::vector<Parameter> params = {MakeParam(kInit, DType::kBF16)};
  Optimizer opt(spec, &params, /*master_weights=*/true);
  ASSERT_EQ(opt.updated_weights().size(), 1u);
  const Tensor master = opt.updated_weights()[0];
  EXPECT_EQ(master.dtype(), DType::kF32);
  EXPECT_NE(master.impl(), params[0].value.impl());
  EXPECT_EQ(params[0].value.dtype(), DType::kBF16);

  for (int s = 0; s < kSteps; ++s) {
    opt.ZeroGrad();
    SetGrad(params[0], GradAt(s));
    std::vector<Tensor> grads = opt.CollectGradients();
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_EQ(grads[0].dtype(), DType::kF32);  // f32 copies of the bf16 grads
    EXPECT_NE(grads[0].impl(), params[0].value.grad().impl());
    opt.Step(0.05);
    const std::vector<float> m = master.ToFloats();
    const std::vector<float> model = params[0].value.ToFloats();
    for (size_t i = 0; i < m.size(); ++i) {
      EXPECT_EQ(model[i], BF16BitsToF32(F32ToBF16Bits(m[i]))) << "step " << s << " i " << i;
    }
  }
  // The master follows the f32 reference from the bf16-rounded start and grads.
  std::vector<double> start;
  for (float f : Tensor::FromVector(ToF(kInit), {5}, DType::kBF16).ToFloats()) start.push_back(f);
  std::vector<double> p = start, buf(p.size());
  for (int s = 0; s < kSteps; ++s) {
    std::vector<float> g = Tensor::FromVector(ToF(GradAt(s)), {5}, DType::kBF16).ToFloats();
    for (size_t i = 0; i < p.size(); ++i) {
      buf[i] = s == 0 ? g[i] : 0.9 * buf[i] + g[i];
      p[i] -= 0.05 * buf[i];
    }
  }
  const std::vector<float> m = master.ToFloats();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(m[i], p[i], 2e-6) << i;
}

TEST(OptimizerTest, TinyUpdatesAccumulateInTheMasterButNotInBf16Alone) {
  OptimizerSpec spec = Sgd();
  const std::vector<double> ones(4, 1.0);
  const std::vector<double> grad(4, 1.0);
  // Each update is 1e-4, far below bf16's half-ulp at 1.0 (2^-9).
  const double lr = 1e-4;
  const int steps = 200;

  std::vector<Parameter> with = {MakeParam(ones, DType::kBF16)};
  std::vector<Parameter> without = {MakeParam(ones, DType::kBF16)};
  Optimizer a(spec, &with, /*master_weights=*/true);
  Optimizer b(spec, &without, /*master_weights=*/false);
  for (int s = 0; s < steps; ++s) {
    for (auto [opt, params] : {std::pair{&a, &with}, std::pair{&b, &without}}) {
      opt->ZeroGrad();
      SetGrad((*params)[0], grad);
      opt->CollectGradients();
      opt->Step(lr);
    }
  }
  const float master = a.updated_weights()[0].ToFloats()[0];
  EXPECT_NEAR(master, 1.0 - steps * lr, 3e-5);
  EXPECT_EQ(with[0].value.ToFloats()[0], BF16BitsToF32(F32ToBF16Bits(master)));
  EXPECT_LT(with[0].value.ToFloats()[0], 1.0f);
  // Without a master copy every update rounds back to 1.0.
  EXPECT_EQ(without[0].value.ToFloats()[0], 1.0f);
  EXPECT_EQ(b.updated_weights()[0].impl(), without[0].value.impl());
}

TEST(OptimizerTest, F32NormParametersNeedNoMasterCopy) {
  std::vector<Parameter> params = {MakeParam(kInit, DType::kF16, "fc.weight"),
                                   MakeParam(kInit, DType::kF32, "norm.weight")};
  Optimizer opt(Sgd(), &params, /*master_weights=*/true);
  EXPECT_NE(opt.updated_weights()[0].impl(), params[0].value.impl());
  EXPECT_EQ(opt.updated_weights()[1].impl(), params[1].value.impl());
  EXPECT_EQ(opt.ParameterNames(), (std::vector<std::string>{"fc.weight", "norm.weight"}));
  SetGrad(params[0], GradAt(0));
  SetGrad(params[1], GradAt(0));
  opt.CollectGradients();
  opt.Step(0.1);
  const std::vector<float> norm = params[1].value.ToFloats();
  for (size_t i = 0; i < kInit.size(); ++i) {
    EXPECT_NEAR(norm[i], kInit[i] - 0.1 * static_cast<float>(GradAt(0)[i]), 1e-6);
  }
}

TEST(OptimizerTest, ParametersWithoutGradientsAreLeftAlone) {
  std::vector<Parameter> params = {MakeParam(kInit, DType::kF32, "a"),
                                   MakeParam(kInit, DType::kF32, "b")};
  Optimizer opt(OptimizerSpec{}, &params, false);
  SetGrad(params[0], GradAt(0));
  std::vector<Tensor> grads = opt.CollectGradients();
  EXPECT_TRUE(grads[0].defined());
  EXPECT_FALSE(grads[1].defined());
  opt.Step(0.1);
  EXPECT_NE(params[0].value.ToFloats(), ToF(kInit));
  EXPECT_EQ(params[1].value.ToFloats(), ToF(kInit));
}

TEST(OptimizerTest, ConstantSchedule) {
  ScheduleSpec s;
  for (int64_t step : {0, 1, 50, 99, 500}) {
    EXPECT_EQ(ScheduledLearningRate(s, 0.3, step, 100), 0.3);
  }
}

TEST(OptimizerTest, WarmupCosineAtKeySteps) {
  ScheduleSpec s;
  s.kind = ScheduleSpec::Kind::kWarmupCosine;
  s.warmup_steps = 10;
  s.min_lr_ratio = 0.1;
  const double lr = 2.0;
  const int64_t total = 110;  // 100 decay steps
  // Linear warmup from lr/warmup to lr.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(s, lr, 0, total), 0.2);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(s, lr, 4, total), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(s, lr, 9, total), 2.0);
  // Cosine from lr at the end of warmup to lr * min_lr_ratio.
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(s, lr, 10, total), 2.0);
  EXPECT_NEAR(ScheduledLearningRate(s, lr, 35, total),
              lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25))), 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(s, lr, 60, total), lr * (0.1 + 0.9 * 0.5), 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(s, lr, 110, total), 0.2, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(s, lr, 500, total), 0.2, 1e-12);  // stays at the floor
  // Monotone decay after warmup.
  for (int64_t i = 10; i < 110; ++i) {
    EXPECT_LE(ScheduledLearningRate(s, lr, i + 1, total), ScheduledLearningRate(s, lr, i, total));
  }
  // No warmup: cosine from step 0, down to 0 without a floor.
  ScheduleSpec plain;
  plain.kind = ScheduleSpec::Kind::kWarmupCosine;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(plain, 1.0, 0, 100), 1.0);
  EXPECT_NEAR(ScheduledLearningRate(plain, 1.0, 50, 100), 0.5, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(plain, 1.0, 100, 100), 0.0, 1e-12);
}

TEST(OptimizerTest, ValidationNamesTheField) {
  auto expect = [](void (*mutate)(OptimizerSpec&), const std::string& field) {
    OptimizerSpec s;
    mutate(s);
    absl::Status st = ValidateOptimizerSpec(s);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(absl::StartsWith(st.message(), field + ":")) << field << " vs " << st;
  };
  EXPECT_TRUE(ValidateOptimizerSpec(OptimizerSpec{}).ok());
  expect([](OptimizerSpec& s) { s.lr = 0; }, "optimizer.lr");
  expect([](OptimizerSpec& s) { s.lr = -1e-3; }, "optimizer.lr");
  expect([](OptimizerSpec& s) { s.lr = NAN; }, "optimizer.lr");
  expect([](OptimizerSpec& s) { s.lr = INFINITY; }, "optimizer.lr");
  expect([](OptimizerSpec& s) { s.weight_decay = -0.1; }, "optimizer.weight_decay");
  expect([](OptimizerSpec& s) { s.weight_decay = NAN; }, "optimizer.weight_decay");
  expect([](OptimizerSpec& s) { s.momentum = 1.0; }, "optimizer.momentum");
  expect([](OptimizerSpec& s) { s.momentum = -0.5; }, "optimizer.momentum");
  expect(
      [](OptimizerSpec& s) {
        s.kind = OptimizerSpec::Kind::kSgd;
        s.nesterov = true;
      },
      "optimizer.nesterov");
  expect([](OptimizerSpec& s) { s.beta1 = 1.0; }, "optimizer.beta1");
  expect([](OptimizerSpec& s) { s.beta2 = -0.1; }, "optimizer.beta2");
  expect([](OptimizerSpec& s) { s.beta2 = 1.0; }, "optimizer.beta2");
  expect([](OptimizerSpec& s) { s.eps = 0; }, "optimizer.eps");
}

}  // namespace
}  // namespace ampd::engine
