// GradScaler: torch.amp.GradScaler semantics and defaults, plus ampd's
// extensions (min/max bounds, static mode, skip events).

#include "engine/amp/grad_scaler.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/amp/precision.h"
#include "engine/autograd/autograd.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using amp::GradScaler;
using amp::GradScalerOptions;
using amp::PrecisionConfig;
using amp::ResolvePrecision;
using amp::SkipEvent;
using amp::ValidateGradScalerOptions;
using autograd::Backward;
using backend::AmpUpdateScale;
using backend::GradScalerState;
using core::BF16BitsToF32;
using core::F16BitsToF32;
using core::F32ToBF16Bits;
using core::F32ToF16Bits;
using ops::Sum;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

Tensor F32(const std::vector<float>& v) {
  return Tensor::FromVector(v, {static_cast<int64_t>(v.size())}, DType::kF32);
}

GradScalerOptions WithInterval(int64_t interval, double init = 1024.0) {
  GradScalerOptions o;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}

// One step of the scaler with a single gradient that is finite or not.
std::optional<SkipEvent> Step(GradScaler& s, int64_t step, bool bad) {
  Tensor g = F32({1.0f, bad ? kInf : 2.0f});
  s.Unscale({g}, {"w"});
  return s.Update(step);
}

void ExpectField(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(std::string(status.message()).rfind(field + ":", 0), 0u)
      << "expected the message to start with \"" << field << ":\", got: " << status;
}

TEST(GradScalerTest, DefaultsMatchTorchAmpGradScaler) {
  GradScalerOptions o;
  EXPECT_TRUE(o.enabled);
  EXPECT_TRUE(o.dynamic);
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.growth_factor, 2.0);
  EXPECT_EQ(o.backoff_factor, 0.5);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_FALSE(o.min_scale.has_value());
  EXPECT_FALSE(o.max_scale.has_value());
  EXPECT_TRUE(ValidateGradScalerOptions(o).ok());

  GradScaler s;
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.state().scale, 65536.0);
  EXPECT_FALSE(s.found_inf());
}

TEST(GradScalerTest, ScaleMultipliesTheLossAndItsGradients) {
  GradScaler s(WithInterval(2000, 512.0));
  Tensor w = F32({1.0f, -2.0f, 3.0f});
  w.set_requires_grad(true);
  Tensor loss = Sum(w);
  Tensor scaled = s.Scale(loss);
  EXPECT_EQ(scaled.Item(), 512.0f * 2.0f);
  Backward(scaled);
  ASSERT_TRUE(w.grad().defined());
  for (float g : w.grad().ToFloats()) EXPECT_EQ(g, 512.0f);
}

TEST(GradScalerTest, InvScaleIsTheF64ReciprocalRoundedToF32AndMultiplied) {
  // With scale 3, multiplying by float(1/3.0) differs from dividing by 3 for
  // some values; PyTorch multiplies.
  GradScaler s(WithInterval(2000, 3.0));
  const float inv = static_cast<float>(1.0 / 3.0);
  std::vector<float> values;
  for (int i = 1; i <= 64; ++i) values.push_back(static_cast<float>(i) * 0.37f + 1e-3f * i);
  bool some_differ = false;
  for (float v : values) some_differ |= (v * inv != v / 3.0f);
  ASSERT_TRUE(some_differ) << "the test values do not tell multiply from divide";

  Tensor g = F32(values);
  EXPECT_TRUE(s.Unscale({g}, {"w"}));
  std::vector<float> out = g.ToFloats();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(Bits(out[i]), Bits(values[i] * inv)) << "element " << i;
  }
}

TEST(GradScalerTest, UnscalesF16AndBf16GradientsRoundingOnce) {
  GradScaler s(WithInterval(2000, 1024.0));
  const float inv = 1.0f / 1024.0f;
  const std::vector<float> v = {1000.0f, -3.0f, 65504.0f, 0.125f, 7.0f, -1234.5f};
  Tensor f16 = Tensor::FromVector(v, {2, 3}, DType::kF16);
  Tensor bf16 = Tensor::FromVector(v, {2, 3}, DType::kBF16);
  Tensor f32 = F32(v);
  std::vector<float> f16_in = f16.ToFloats(), bf16_in = bf16.ToFloats();
  EXPECT_TRUE(s.Unscale({f16, bf16, f32}, {"a", "b", "c"}));
  EXPECT_EQ(f16.dtype(), DType::kF16);
  EXPECT_EQ(bf16.dtype(), DType::kBF16);
  std::vector<float> f16_out = f16.ToFloats(), bf16_out = bf16.ToFloats(), f32_out = f32.ToFloats();
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(f16_out[i], F16BitsToF32(F32ToF16Bits(f16_in[i] * inv))) << i;
    EXPECT_EQ(bf16_out[i], BF16BitsToF32(F32ToBF16Bits(bf16_in[i] * inv))) << i;
    EXPECT_EQ(f32_out[i], v[i] * inv) << i;
  }
}

TEST(GradScalerTest, UnscaleIsFusedOverAllGradientsAndNamesTheFirstBadOne) {
  GradScaler s(WithInterval(2000, 4.0));
  Tensor a = F32({4.0f, 8.0f});
  Tensor b = F32({4.0f, kInf, 12.0f});
  Tensor c = F32({kNaN, 4.0f});
  Tensor d = F32({16.0f});
  EXPECT_FALSE(s.Unscale({a, b, c, d}, {"fc1.weight", "fc1.bias", "head.weight", "head.bias"}));
  EXPECT_TRUE(s.found_inf());
  // Every gradient was unscaled, including those after the first bad one.
  EXPECT_EQ(a.ToFloats(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(b.ToFloats()[0], 1.0f);
  EXPECT_EQ(b.ToFloats()[2], 3.0f);
  EXPECT_EQ(c.ToFloats()[1], 1.0f);
  EXPECT_EQ(d.ToFloats()[0], 4.0f);

  std::optional<SkipEvent> e = s.Update(7);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step, 7);
  EXPECT_EQ(e->reason, "non-finite gradient");
  EXPECT_EQ(e->first_parameter, "fc1.bias");
  EXPECT_EQ(e->scale_before, 4.0);
  EXPECT_EQ(e->scale_after, 2.0);
  EXPECT_FALSE(s.found_inf());  // reset for the next step
}

struct BadValueCase {
  float value;
  const char* label;
};

class NonFiniteTest : public ::testing::TestWithParam<BadValueCase> {};

TEST_P(NonFiniteTest, DetectsTheValueAndNamesItsParameter) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    GradScaler s(WithInterval(2000, 8.0));
    Tensor ok = Tensor::FromVector({1.0f, 2.0f}, {2}, dt);
    Tensor bad = Tensor::FromVector({0.5f, 1.0f, GetParam().value}, {3}, dt);
    EXPECT_FALSE(s.Unscale({ok, ok.Clone(), bad}, {"fc1.weight", "fc1.bias", "head.weight"}))
        << GetParam().label << " " << DTypeName(dt);
    std::optional<SkipEvent> e = s.Update(1);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->first_parameter, "head.weight");
  }
}

INSTANTIATE_TEST_SUITE_P(Values, NonFiniteTest,
                         ::testing::Values(BadValueCase{kNaN, "nan"}, BadValueCase{kInf, "+inf"},
                                           BadValueCase{-kInf, "-inf"}),
                         [](const auto& info) {
                           return std::string(info.param.value != info.param.value ? "NaN"
                                              : info.param.value > 0               ? "PosInf"
                                                                                   : "NegInf");
                         });

TEST(GradScalerTest, UndefinedGradientsAreSkippedAndNamesStayAligned) {
  GradScaler s(WithInterval(2000, 2.0));
  Tensor good = F32({2.0f});
  Tensor bad = F32({kNaN});
  EXPECT_FALSE(s.Unscale({Tensor(), good, Tensor(), bad}, {"p0", "p1", "p2", "p3"}));
  EXPECT_EQ(good.ToFloats()[0], 1.0f);
  std::optional<SkipEvent> e = s.Update(1);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->first_parameter, "p3");
}

TEST(GradScalerTest, UnscaleTwiceInOneStepUnscalesOnce) {
  GradScaler s(WithInterval(2000, 4.0));
  Tensor g = F32({8.0f});
  EXPECT_TRUE(s.Unscale({g}, {"w"}));
  EXPECT_TRUE(s.Unscale({g}, {"w"}));
  EXPECT_EQ(g.ToFloats()[0], 2.0f);
  EXPECT_FALSE(s.Update(1).has_value());
  // A new step unscales again.
  EXPECT_TRUE(s.Unscale({g}, {"w"}));
  EXPECT_EQ(g.ToFloats()[0], 0.5f);
}

TEST(GradScalerTest, GrowsAfterExactlyGrowthIntervalGoodSteps) {
  GradScaler s(WithInterval(3, 1024.0));
  EXPECT_FALSE(Step(s, 1, false).has_value());
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.growth_tracker(), 1);
  EXPECT_FALSE(Step(s, 2, false).has_value());
  EXPECT_EQ(s.scale(), 1024.0f);
  EXPECT_EQ(s.growth_tracker(), 2);
  EXPECT_FALSE(Step(s, 3, false).has_value());
  EXPECT_EQ(s.scale(), 2048.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) Step(s, 4 + i, false);
  EXPECT_EQ(s.scale(), 4096.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScalerTest, NonFiniteStepBacksOffAndResetsTheTracker) {
  GradScaler s(WithInterval(3, 1024.0));
  Step(s, 1, false);
  Step(s, 2, false);
  ASSERT_EQ(s.growth_tracker(), 2);
  std::optional<SkipEvent> e = Step(s, 3, true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  // Growth again needs three fresh good steps, not one.
  Step(s, 4, false);
  EXPECT_EQ(s.scale(), 512.0f);
  Step(s, 5, false);
  EXPECT_EQ(s.scale(), 512.0f);
  Step(s, 6, false);
  EXPECT_EQ(s.scale(), 1024.0f);
}

TEST(GradScalerTest, GrowthIsSuppressedWhenTheGrownScaleIsNotFinite) {
  GradScalerOptions o = WithInterval(2, std::ldexp(1.0, 127));
  GradScaler s(o);
  Step(s, 1, false);
  Step(s, 2, false);  // 2^128 overflows f32: the scale stays, the tracker resets
  EXPECT_EQ(s.scale(), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isfinite(s.scale()));
  EXPECT_EQ(s.growth_tracker(), 0);

  GradScalerState st = AmpUpdateScale({std::ldexp(1.0, 127), 1}, false, 2.0, 0.5, 2);
  EXPECT_EQ(st.scale, std::ldexp(1.0, 127));
  EXPECT_EQ(st.growth_tracker, 0);
}

TEST(GradScalerTest, AmpUpdateScaleRoundsLikeAnF32Tensor) {
  // PyTorch holds the scale in an f32 tensor; a growth factor that is not a
  // power of two rounds each product to f32.
  GradScalerState st{3.0, 0};
  for (int i = 0; i < 5; ++i) st = AmpUpdateScale(st, false, 1.1, 0.5, 1);
  float expect = 3.0f;
  for (int i = 0; i < 5; ++i) expect = expect * 1.1f;
  EXPECT_EQ(st.scale, static_cast<double>(expect));
  st = AmpUpdateScale(st, true, 1.1, 0.3, 1);
  EXPECT_EQ(st.scale, static_cast<double>(expect * 0.3f));
  EXPECT_EQ(st.growth_tracker, 0);
}

TEST(GradScalerTest, MinScaleBoundsTheBackoff) {
  GradScalerOptions o = WithInterval(2000, 4096.0);
  o.min_scale = 1024.0;
  ASSERT_TRUE(ValidateGradScalerOptions(o).ok());
  GradScaler s(o);
  Step(s, 1, true);
  EXPECT_EQ(s.scale(), 2048.0f);
  Step(s, 2, true);
  EXPECT_EQ(s.scale(), 1024.0f);
  std::optional<SkipEvent> e = Step(s, 3, true);
  EXPECT_EQ(s.scale(), 1024.0f);
  ASSERT_TRUE(e.has_value());  // still skipped and reported
  EXPECT_EQ(e->scale_before, 1024.0);
  EXPECT_EQ(e->scale_after, 1024.0);
}

TEST(GradScalerTest, MaxScaleBoundsTheGrowth) {
  GradScalerOptions o = WithInterval(1, 1024.0);
  o.max_scale = 3000.0;
  GradScaler s(o);
  Step(s, 1, false);
  EXPECT_EQ(s.scale(), 2048.0f);
  Step(s, 2, false);
  EXPECT_EQ(s.scale(), 3000.0f);
  Step(s, 3, false);
  EXPECT_EQ(s.scale(), 3000.0f);
  Step(s, 4, true);
  EXPECT_EQ(s.scale(), 1500.0f);
}

TEST(GradScalerTest, StaticModeKeepsTheScaleButStillSkipsAndReports) {
  GradScalerOptions o = WithInterval(1, 128.0);
  o.dynamic = false;
  GradScaler s(o);
  Tensor g = F32({256.0f});
  EXPECT_TRUE(s.Unscale({g}, {"w"}));
  EXPECT_EQ(g.ToFloats()[0], 2.0f);
  EXPECT_FALSE(s.Update(1).has_value());
  EXPECT_EQ(s.scale(), 128.0f);  // no growth even with growth_interval 1

  Tensor bad = F32({kInf});
  EXPECT_FALSE(s.Unscale({bad}, {"head.bias"}));
  std::optional<SkipEvent> e = s.Update(2);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step, 2);
  EXPECT_EQ(e->first_parameter, "head.bias");
  EXPECT_EQ(e->scale_before, 128.0);
  EXPECT_EQ(e->scale_after, 128.0);
  EXPECT_EQ(s.scale(), 128.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScalerTest, DisabledScalerIsTheIdentity) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler s(o);
  EXPECT_EQ(s.scale(), 1.0f);
  Tensor loss = F32({3.0f});
  EXPECT_EQ(s.Scale(loss).Item(), 3.0f);
  Tensor g = F32({5.0f, kInf});
  EXPECT_TRUE(s.Unscale({g}, {"w"}));
  EXPECT_EQ(g.ToFloats()[0], 5.0f);
  EXPECT_FALSE(s.Update(1).has_value());
  EXPECT_EQ(s.scale(), 1.0f);
}

TEST(GradScalerTest, SaveAndLoadStateRoundTrips) {
  GradScaler a(WithInterval(4, 1024.0));
  Step(a, 1, false);
  Step(a, 2, true);
  Step(a, 3, false);
  Step(a, 4, false);
  const GradScalerState saved = a.state();
  EXPECT_EQ(saved.scale, 512.0);
  EXPECT_EQ(saved.growth_tracker, 2);

  GradScaler b(WithInterval(4, 1024.0));
  b.LoadState(saved);
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  // Both continue identically: two more good steps grow both.
  for (int i = 0; i < 2; ++i) {
    Step(a, 5 + i, false);
    Step(b, 5 + i, false);
  }
  EXPECT_EQ(a.scale(), 1024.0f);
  EXPECT_EQ(b.scale(), 1024.0f);
  EXPECT_EQ(b.growth_tracker(), 0);
  EXPECT_EQ(b.state().scale, a.state().scale);
}

TEST(GradScalerTest, ValidationNamesEachBadField) {
  auto with = [](auto mutate) {
    GradScalerOptions o;
    mutate(o);
    return ValidateGradScalerOptions(o);
  };
  ExpectField(with([](GradScalerOptions& o) { o.init_scale = 0; }), "loss_scaling.init_scale");
  ExpectField(with([](GradScalerOptions& o) { o.init_scale = -1; }), "loss_scaling.init_scale");
  ExpectField(with([](GradScalerOptions& o) { o.init_scale = INFINITY; }),
              "loss_scaling.init_scale");
  ExpectField(with([](GradScalerOptions& o) { o.init_scale = NAN; }), "loss_scaling.init_scale");
  ExpectField(with([](GradScalerOptions& o) { o.growth_factor = 1.0; }),
              "loss_scaling.growth_factor");
  ExpectField(with([](GradScalerOptions& o) { o.growth_factor = 0.5; }),
              "loss_scaling.growth_factor");
  ExpectField(with([](GradScalerOptions& o) { o.backoff_factor = 0.0; }),
              "loss_scaling.backoff_factor");
  ExpectField(with([](GradScalerOptions& o) { o.backoff_factor = 1.0; }),
              "loss_scaling.backoff_factor");
  ExpectField(with([](GradScalerOptions& o) { o.backoff_factor = 2.0; }),
              "loss_scaling.backoff_factor");
  ExpectField(with([](GradScalerOptions& o) { o.growth_interval = 0; }),
              "loss_scaling.growth_interval");
  ExpectField(with([](GradScalerOptions& o) { o.min_scale = 0.0; }), "loss_scaling.min_scale");
  ExpectField(with([](GradScalerOptions& o) { o.min_scale = -4.0; }), "loss_scaling.min_scale");
  ExpectField(with([](GradScalerOptions& o) {
                o.min_scale = 8.0;
                o.max_scale = 4.0;
              }),
              "loss_scaling.max_scale");
  // A bound of zero or less would drive the scale to 0 (inv_scale inf).
  ExpectField(with([](GradScalerOptions& o) { o.max_scale = 0.0; }), "loss_scaling.max_scale");
  ExpectField(with([](GradScalerOptions& o) { o.max_scale = -1.0; }), "loss_scaling.max_scale");
  ExpectField(with([](GradScalerOptions& o) { o.max_scale = NAN; }), "loss_scaling.max_scale");
  EXPECT_TRUE(with([](GradScalerOptions& o) {
                o.min_scale = 1.0;
                o.max_scale = 1.0;
              }).ok());
}

TEST(GradScalerTest, ScalingIsOffForBf16MixedAndOnFor16Mixed) {
  absl::StatusOr<PrecisionConfig> bf16 = ResolvePrecision("bf16-mixed");
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_FALSE(bf16->loss_scaling.enabled);
  EXPECT_EQ(GradScaler(bf16->loss_scaling).scale(), 1.0f);

  absl::StatusOr<PrecisionConfig> f16 = ResolvePrecision("16-mixed");
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_TRUE(f16->loss_scaling.enabled);
  EXPECT_TRUE(f16->loss_scaling.dynamic);
  EXPECT_EQ(f16->loss_scaling.init_scale, 65536.0);
  EXPECT_EQ(f16->loss_scaling.growth_factor, 2.0);
  EXPECT_EQ(f16->loss_scaling.backoff_factor, 0.5);
  EXPECT_EQ(f16->loss_scaling.growth_interval, 2000);
  EXPECT_EQ(GradScaler(f16->loss_scaling).scale(), 65536.0f);
}

}  // namespace
}  // namespace ampd::engine
