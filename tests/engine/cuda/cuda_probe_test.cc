#include "engine/cuda/cuda_probe.h"

#include <vector>

#include "gtest/gtest.h"

namespace ampd::engine::cuda {
namespace {

TEST(CudaProbeTest, NoDeviceIsAnAnswerWithAReason) {
  ProbeResult probe = ProbeDevices();
  if (probe.device_count == 0) {
    EXPECT_FALSE(probe.reason.empty());
  } else {
    EXPECT_TRUE(probe.reason.empty()) << probe.reason;
  }
}

TEST(CudaProbeTest, SaxpyMatchesCpuReference) {
  ProbeResult probe = ProbeDevices();
  if (probe.device_count == 0) GTEST_SKIP() << "no usable GPU: " << probe.reason;
  const int n = 1000;
  std::vector<float> x(n), y(n), expected(n);
  for (int i = 0; i < n; ++i) {
    x[i] = 0.5f * i;
    y[i] = 3.0f - i;
    expected[i] = 2.0f * x[i] + y[i];
  }
  ASSERT_EQ(SaxpyOnDevice(2.0f, x, y), "");
  for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], expected[i]) << "at " << i;
}

}  // namespace
}  // namespace ampd::engine::cuda
