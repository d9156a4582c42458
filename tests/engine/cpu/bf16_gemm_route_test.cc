// The two ways the CPU backend multiplies bf16 matrices (bf16_gemm_route.h):
// each route of Matmul, Linear and the raw GemmBf16 against the exact f64
// product of the bf16 operands (f32 sums: within their rounding; bf16
// results: the exact product rounded once, but for sums within an f32
// rounding of a bf16 tie); the widened route bit for bit what widening by
// hand and an f32 GEMM give; and the rule that picks the route.

#include "engine/cpu/bf16_gemm_route.h"

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "engine/backend/kernels/matmul.h"
#include "engine/core/half.h"
#include "engine/cpu/capabilities.h"
#include "engine/cpu/gemm.h"
#include "gtest/gtest.h"
#include "tests/engine/random_values.h"

namespace ampd::engine::cpu {
namespace {

using testing::RandomValues;

// Forces a route for one scope.
class ForcedRoute {
 public:
  explicit ForcedRoute(Bf16GemmOverride r) { SetBf16GemmRouteForTesting(r); }
  ~ForcedRoute() { SetBf16GemmRouteForTesting(Bf16GemmOverride::kDefault); }
};

std::vector<Bf16GemmOverride> Routes() {
  std::vector<Bf16GemmOverride> r = {Bf16GemmOverride::kWidened};
  if (ProbeCpu().bf16_matmul) r.push_back(Bf16GemmOverride::kNative);
  return r;
}

// f64 of a value rounded to bf16 (round to nearest even), through a tensor.
double RoundBf16(double v) { return Tensor::FromDoubles({v}, {1}, DType::kBF16).ToDoubles()[0]; }

// op(a)[m x k] op(b)[k x n] exactly (bf16 products and their sums are exact
// in f64 for these sizes up to one rounding far below f32's), plus abs sums
// for the f32 tolerance.
void Reference(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n,
               int64_t k, bool ta, bool tb, std::vector<double>* c, std::vector<double>* mag) {
  c->assign(m * n, 0);
  mag->assign(m * n, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        const double x = a[ta ? p * m + i : i * k + p] * b[tb ? j * k + p : p * n + j];
        (*c)[i * n + j] += x;
        (*mag)[i * n + j] += std::fabs(x);
      }
}

TEST(Bf16GemmRouteTest, BothRoutesOfMatmulAreTheExactProductRoundedOnce) {
  // A small shape and a larger one (several of oneDNN's blocks).
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 53, 70}, {300, 96, 512}})
    for (Bf16GemmOverride route : Routes()) {
      ForcedRoute forced(route);
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const Tensor a = Tensor::FromDoubles(
              RandomValues(m * k, 1), ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k},
              DType::kBF16);
          const Tensor b = Tensor::FromDoubles(
              RandomValues(k * n, 2), tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n},
              DType::kBF16);
          std::vector<double> want, mag;
          Reference(a.ToDoubles(), b.ToDoubles(), m, n, k, ta, tb, &want, &mag);
          const auto matmul = backend::Kernel<backend::MatmulKernel>(Device::kCpu);
          const std::vector<double> f32 = matmul(a, b, ta, tb, DType::kF32).ToDoubles();
          const std::vector<double> bf16 = matmul(a, b, ta, tb, DType::kBF16).ToDoubles();
          int64_t rounded_exactly = 0;
          for (int64_t i = 0; i < m * n; ++i) {
            // k f32 additions, each off by at most half an ulp of the partial sum.
            ASSERT_NEAR(f32[i], want[i], k * std::ldexp(mag[i], -24))
                << "route " << static_cast<int>(route) << " ta " << ta << " tb " << tb << " at "
                << i;
            // bf16: the f32 sum rounded once, so the exact value's rounding or
            // (within an f32 rounding of a tie) its neighbour.
            ASSERT_EQ(bf16[i], RoundBf16(f32[i])) << "at " << i;
            rounded_exactly += bf16[i] == RoundBf16(want[i]);
          }
          EXPECT_GE(rounded_exactly, m * n * 99 / 100);
        }
      }
    }
}

// The widened route is what it says: bit for bit, the operands widened by
// hand (exact) through oneDNN's f32 matmul.
TEST(Bf16GemmRouteTest, TheWidenedRouteIsAnF32GemmOfTheWidenedOperands) {
  const int64_t m = 64, n = 96, k = 200;
  ForcedRoute forced(Bf16GemmOverride::kWidened);
  ASSERT_EQ(Bf16GemmRouteInEffect(), Bf16GemmRoute::kWidened);
  const auto matmul = backend::Kernel<backend::MatmulKernel>(Device::kCpu);
  const Tensor a = Tensor::FromDoubles(RandomValues(m * k, 3), {m, k}, DType::kBF16);
  const Tensor b = Tensor::FromDoubles(RandomValues(n * k, 4), {n, k}, DType::kBF16);
  const Tensor af = Tensor::FromDoubles(a.ToDoubles(), {m, k}, DType::kF32);
  const Tensor bf = Tensor::FromDoubles(b.ToDoubles(), {n, k}, DType::kF32);
  const std::vector<double> by_hand = matmul(af, bf, false, true, DType::kF32).ToDoubles();
  EXPECT_EQ(matmul(a, b, false, true, DType::kF32).ToDoubles(), by_hand);
  // The raw GEMM the attention backward uses, likewise.
  std::vector<float> c(m * n);
  GemmBf16(a.data<uint16_t>(), b.data<uint16_t>(), c.data(), m, n, k, false, true);
  for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(c[i], by_hand[i]) << i;
  // Linear: the bias in the f32 epilogue, one rounding to bf16.
  const Tensor bias = Tensor::FromDoubles(RandomValues(n, 5), {n}, DType::kF32);
  const std::vector<double> lin =
      backend::Kernel<backend::LinearKernel>(Device::kCpu)(a, b, bias, DType::kBF16).ToDoubles();
  const std::vector<double> lin_f32 =
      backend::Kernel<backend::LinearKernel>(Device::kCpu)(af, bf, bias, DType::kF32).ToDoubles();
  for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(lin[i], RoundBf16(lin_f32[i])) << i;
}

// Linear by either route at a larger shape: the bias added once, in f32,
// before the one rounding.
TEST(Bf16GemmRouteTest, LinearByEitherRouteAddsTheBiasBeforeTheOneRounding) {
  const int64_t m = 333, n = 80, k = 384;
  for (Bf16GemmOverride route : Routes()) {
    ForcedRoute forced(route);
    const Tensor x = Tensor::FromDoubles(RandomValues(m * k, 8), {m, k}, DType::kBF16);
    const Tensor w = Tensor::FromDoubles(RandomValues(n * k, 9), {n, k}, DType::kBF16);
    const Tensor b = Tensor::FromDoubles(RandomValues(n, 10), {n}, DType::kBF16);
    std::vector<double> want, mag;
    Reference(x.ToDoubles(), w.ToDoubles(), m, n, k, false, true, &want, &mag);
    const std::vector<double> bv = b.ToDoubles();
    const auto linear = backend::Kernel<backend::LinearKernel>(Device::kCpu);
    const std::vector<double> f32 = linear(x, w, b, DType::kF32).ToDoubles();
    const std::vector<double> bf16 = linear(x, w, b, DType::kBF16).ToDoubles();
    for (int64_t i = 0; i < m * n; ++i) {
      const double exact = want[i] + bv[i % n];
      ASSERT_NEAR(f32[i], exact, (k + 1) * std::ldexp(mag[i] + std::fabs(bv[i % n]), -24))
          << "route " << static_cast<int>(route) << " at " << i;
      ASSERT_EQ(bf16[i], RoundBf16(f32[i])) << "route " << static_cast<int>(route) << " at " << i;
    }
  }
}

// The raw GEMM by either route against the exact product.
TEST(Bf16GemmRouteTest, GemmBf16ByEitherRouteIsTheExactProductInF32) {
  const int64_t m = 33, n = 40, k = 64;
  for (Bf16GemmOverride route : Routes()) {
    ForcedRoute forced(route);
    for (bool ta : {false, true}) {
      const Tensor a = Tensor::FromDoubles(RandomValues(m * k, 6), {m * k}, DType::kBF16);
      const Tensor b = Tensor::FromDoubles(RandomValues(k * n, 7), {k * n}, DType::kBF16);
      std::vector<double> want, mag;
      Reference(a.ToDoubles(), b.ToDoubles(), m, n, k, ta, false, &want, &mag);
      std::vector<float> c(m * n, -1.0f);
      GemmBf16(a.data<uint16_t>(), b.data<uint16_t>(), c.data(), m, n, k, ta, false);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_NEAR(c[i], want[i], k * std::ldexp(mag[i], -24)) << "ta " << ta << " at " << i;
      }
    }
  }
}

TEST(Bf16GemmRouteTest, TheRuleWidensOnlyWhereNativeIsMissingOrMeasuredSlower) {
  using R = Bf16GemmRoute;
  // (onednn_bf16, intel, avx512_bf16, avx512_fp16, amx)
  // No oneDNN bf16 matmul (no AVX-512): always widened.
  EXPECT_EQ(DecideBf16GemmRoute(false, false, false, false, false), R::kWidened);
  EXPECT_EQ(DecideBf16GemmRoute(false, true, false, false, false), R::kWidened);
  // A Sapphire Rapids-class Intel core with AMX off (the Xeon measured):
  // widened; with AMX: native.
  EXPECT_EQ(DecideBf16GemmRoute(true, true, true, true, false), R::kWidened);
  EXPECT_EQ(DecideBf16GemmRoute(true, true, true, true, true), R::kNative);
  // AMD's Zen 4 and 5 (AVX512-BF16, Zen 5 without FP16 too): native.
  EXPECT_EQ(DecideBf16GemmRoute(true, false, true, false, false), R::kNative);
  EXPECT_EQ(DecideBf16GemmRoute(true, false, true, true, false), R::kNative);
  // Intel without AVX512-BF16 (oneDNN emulates bf16) or Cooper Lake
  // (BF16 without FP16): not measured, left native.
  EXPECT_EQ(DecideBf16GemmRoute(true, true, false, false, false), R::kNative);
  EXPECT_EQ(DecideBf16GemmRoute(true, true, true, false, false), R::kNative);
  EXPECT_STREQ(Bf16GemmRouteName(R::kNative), "native");
  EXPECT_STREQ(Bf16GemmRouteName(R::kWidened), "widened");
}

TEST(Bf16GemmRouteTest, TheProcessChoiceSaysWhyAndOverridesWin) {
  const Bf16GemmChoice& c = ChosenBf16GemmRoute();
  EXPECT_NE(c.why.find(c.route == Bf16GemmRoute::kWidened ? "widened to f32" : "oneDNN's bf16"),
            std::string::npos)
      << c.why;
  if (!ProbeCpu().bf16_matmul) {
    EXPECT_EQ(c.route, Bf16GemmRoute::kWidened);
  }
  EXPECT_EQ(Bf16GemmRouteInEffect(), c.route);
  {
    ForcedRoute forced(Bf16GemmOverride::kWidened);
    EXPECT_EQ(Bf16GemmRouteInEffect(), Bf16GemmRoute::kWidened);
  }
  {
    ForcedRoute forced(Bf16GemmOverride::kNative);
    EXPECT_EQ(Bf16GemmRouteInEffect(),
              ProbeCpu().bf16_matmul ? Bf16GemmRoute::kNative : Bf16GemmRoute::kWidened);
  }
  EXPECT_EQ(Bf16GemmRouteInEffect(), c.route);
}

}  // namespace
}  // namespace ampd::engine::cpu
