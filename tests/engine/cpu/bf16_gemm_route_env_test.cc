// AMPD_CPU_BF16_GEMM=widened|native decides the CPU's bf16 GEMM route when
// set before the first bf16 GEMM (its own process: the choice is made once).

#include <cstdlib>
#include <string>

#include "engine/cpu/bf16_gemm_route.h"
#include "engine/cpu/capabilities.h"
#include "gtest/gtest.h"

namespace ampd::engine::cpu {
namespace {

TEST(Bf16GemmRouteEnvTest, TheVariableDecidesAndTheReasonSaysSo) {
  ASSERT_EQ(setenv("AMPD_CPU_BF16_GEMM", "widened", 1), 0);
  const Bf16GemmChoice& c = ChosenBf16GemmRoute();
  EXPECT_EQ(c.route, Bf16GemmRoute::kWidened);
  EXPECT_NE(c.why.find("AMPD_CPU_BF16_GEMM=widened"), std::string::npos) << c.why;
  EXPECT_EQ(Bf16GemmRouteInEffect(), Bf16GemmRoute::kWidened);
}

}  // namespace
}  // namespace ampd::engine::cpu
