// Transformer Engine's delayed-scaling update, replayed over a recorded amax
// sequence against an independent implementation written here from the
// recipe's description: the amax is the max of the last amax_history_len
// steps' amaxes (this one included), or this step's ("most_recent"), and
// scale = (fp8_max / amax) / 2^margin, the previous scale kept when amax is 0
// or not finite, FP32_MAX when the quotient overflows.
#include "engine/backend/fp8_scaling.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::engine::backend {
namespace {

using core::Fp8Format;

// A recorded sequence: ordinary amaxes over several decades, with zeros,
// infinities, NaNs, subnormals (whose scale overflows) and a long quiet run.
std::vector<float> RecordedAmaxes() {
  std::vector<float> a;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> decade(-6.0f, 6.0f);
  for (int step = 0; step < 6000; ++step) {
    float v = std::pow(10.0f, decade(gen));
    switch (step % 97) {
      case 5:
        v = 0.0f;
        break;
      case 11:
        v = std::numeric_limits<float>::infinity();
        break;
      case 23:
        v = std::numeric_limits<float>::quiet_NaN();
        break;
      case 31:
        v = std::numeric_limits<float>::denorm_min();
        break;
      case 47:
        v = 1e-39f;
        break;
      default:
        break;
    }
    if (step >= 3000 && step < 3500) v = 1e-3f;  // a calm stretch: old peaks must age out
    a.push_back(v);
  }
  return a;
}

struct Reference {
  std::deque<float> window;
  float scale = 1.0f;
  void Step(float amax_now, const Fp8Recipe& r, Fp8Format f) {
    window.push_back(amax_now);
    if (static_cast<int>(window.size()) > r.amax_history_len) window.pop_front();
    float amax = amax_now;
    if (r.amax_compute_algo == AmaxAlgo::kMax) {
      bool any = false;
      for (float w : window) {
        if (std::isnan(w)) continue;
        amax = any ? std::max(amax, w) : w;
        any = true;
      }
      if (!any) amax = std::numeric_limits<float>::quiet_NaN();
    }
    if (amax > 0 && std::isfinite(amax)) {
      const float s = (core::Fp8Max(f) * std::pow(2.0f, -r.margin)) / amax;
      scale = std::isinf(s) ? std::numeric_limits<float>::max() : s;
    }
  }
};

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST(Fp8ScalingTest, DelayedScalingReplaysARecordedSequenceAsTheRecipeSays) {
  const std::vector<float> amaxes = RecordedAmaxes();
  for (AmaxAlgo algo : {AmaxAlgo::kMax, AmaxAlgo::kMostRecent}) {
    for (int len : {1, 2, 16, 1024}) {
      for (float margin : {0.0f, 1.0f, 2.5f}) {
        for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
          Fp8Recipe r;
          r.amax_compute_algo = algo;
          r.amax_history_len = len;
          r.margin = margin;
          std::vector<float> history(len, 0.0f);
          float scale = 1.0f, scale_inv = 1.0f;
          Reference ref;
          int inf_scales = 0;
          for (size_t step = 0; step < amaxes.size(); ++step) {
            // The step's casts record into slot 0 (two casts: the larger counts).
            history[0] = std::max(history[0], amaxes[step] * 0.5f);
            history[0] =
                std::isnan(amaxes[step]) ? amaxes[step] : std::max(history[0], amaxes[step]);
            UpdateFp8Scaling(r, f, {history.data(), &scale, &scale_inv});
            ref.Step(amaxes[step], r, f);
            ASSERT_EQ(Bits(scale), Bits(ref.scale))
                << "step " << step << " len " << len << " margin " << margin << " "
                << core::Fp8FormatName(f) << (algo == AmaxAlgo::kMax ? " max" : " most_recent");
            ASSERT_EQ(scale_inv, 1.0f / scale);
            ASSERT_EQ(history[0], 0.0f);  // free for the next step
            inf_scales += scale == std::numeric_limits<float>::max();
          }
          if (algo == AmaxAlgo::kMostRecent || len == 1) {
            EXPECT_GT(inf_scales, 0);  // the subnormal amaxes did overflow the quotient
          }
        }
      }
    }
  }
}

TEST(Fp8ScalingTest, TheWindowIsTheLastHistoryLenSteps) {
  Fp8Recipe r;
  r.amax_history_len = 4;
  std::vector<float> h(4, 0.0f);
  float scale = 1.0f, inv = 1.0f;
  const float seq[] = {8, 1, 1, 1, 1, 2};
  std::vector<float> scales;
  for (float a : seq) {
    h[0] = a;
    UpdateFp8Scaling(r, Fp8Format::kE4M3, {h.data(), &scale, &inv});
    scales.push_back(scale);
  }
  // 8 is in the window for 4 steps (its own and 3 more), then gone.
  EXPECT_EQ(scales[0], 448.0f / 8);
  EXPECT_EQ(scales[3], 448.0f / 8);
  EXPECT_EQ(scales[4], 448.0f / 1);
  EXPECT_EQ(scales[5], 448.0f / 2);
}

TEST(Fp8ScalingTest, AZeroOrNonFiniteAmaxKeepsTheScaleAndHybridFormats) {
  EXPECT_EQ(Fp8ScaleFromAmax(0.0f, 448.0f, 7.0f), 7.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(std::numeric_limits<float>::infinity(), 448.0f, 7.0f), 7.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(std::nanf(""), 448.0f, 7.0f), 7.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(2.0f, 448.0f, 7.0f), 224.0f);
  EXPECT_EQ(Fp8ScaleFromAmax(1e-45f, 448.0f, 7.0f), std::numeric_limits<float>::max());
  EXPECT_EQ(Fp8ScaledMax(Fp8Format::kE5M2, 1.0f), 57344.0f / 2);
  Fp8Recipe hybrid;
  EXPECT_EQ(ForwardFormat(hybrid), Fp8Format::kE4M3);
  EXPECT_EQ(GradientFormat(hybrid), Fp8Format::kE5M2);
  Fp8Recipe e4m3;
  e4m3.format = Fp8FormatRecipe::kE4M3;
  EXPECT_EQ(GradientFormat(e4m3), Fp8Format::kE4M3);
  // TE's defaults.
  EXPECT_EQ(hybrid.margin, 0.0f);
  EXPECT_EQ(hybrid.amax_history_len, 1024);
  EXPECT_EQ(hybrid.amax_compute_algo, AmaxAlgo::kMax);
  EXPECT_EQ(hybrid.kind, Fp8ScalingKind::kDelayed);
}

TEST(Fp8ScalingTest, ABadRecipeNamesItsField) {
  Fp8Recipe r;
  r.margin = -1;
  absl::Status s = ValidateFp8Recipe(r, "precision.fp8");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("precision.fp8.margin"), absl::string_view::npos) << s;
  r = Fp8Recipe{};
  r.amax_history_len = 0;
  s = ValidateFp8Recipe(r, "precision.fp8");
  EXPECT_NE(s.message().find("precision.fp8.amax_history_len"), absl::string_view::npos) << s;
  EXPECT_TRUE(ValidateFp8Recipe(Fp8Recipe{}, "precision.fp8").ok());
}

}  // namespace
}  // namespace ampd::engine::backend
