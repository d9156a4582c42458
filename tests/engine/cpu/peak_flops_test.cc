// The CPU's bf16 GEMM rate (MFU's denominator on the host) is the best of
// repetitions over a minimum duration, so that a slow start (the first
// ~0.1 s of a server ran at a third of the steady rate) cannot be all of it.

#include "engine/cpu/peak_flops.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ampd::engine::cpu {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(PeakFlops, RepeatsForAtLeastTheGivenDuration) {
  const auto start = std::chrono::steady_clock::now();
  const double flops = MeasureBf16GemmFlops(64, 1, 0.2);
  EXPECT_GE(Seconds(start), 0.2);
  EXPECT_GT(flops, 1e6);
}

TEST(PeakFlops, TheProcessWideMeasurementIsTakenOnce) {
  const double first = MeasuredBf16GemmFlops();
  EXPECT_GT(first, 1e9);
  EXPECT_EQ(MeasuredBf16GemmFlops(), first);  // the same bits: not measured again
}

}  // namespace
}  // namespace ampd::engine::cpu
