// Kernels registered per (op, device): typed lookup, what HasKernel answers
// from them, and the fake device running the CPU's kernels generically.

#include "engine/backend/kernel_registry.h"

#include "engine/backend/kernels/dropout.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "tests/engine/fake_device_backend.h"

namespace ampd::engine {

using backend::DropoutKeep;
using backend::DropoutKernel;
using backend::HasKernel;
using backend::Kernel;
using backend::MissingKernelFor;
using backend::RegisterKernel;
using backend::UnaryKernel;

namespace {

// A kernel only this test registers, for the CPU only.
struct NegOnlyOnCpu {
  static constexpr const char* kName = "neg_only_on_cpu";
  static constexpr OpId kOps[] = {OpId::kNeg};
  using Fn = Tensor (*)(const Tensor& x);
};
Tensor CpuNeg(const Tensor& x) { return Kernel<UnaryKernel>(Device::kCpu)(OpId::kNeg, x); }

TEST(KernelRegistryTest, TheCpuDropoutKernelIsRegisteredAndComputesTheMask) {
  EXPECT_TRUE(HasKernel(OpId::kDropout, Device::kCpu));
  EXPECT_TRUE(cpu::CpuBackend().HasKernel(OpId::kDropout));
  const Tensor x = Tensor::Full({1000}, DType::kF32, 1.0);
  const std::vector<float> y = Kernel<DropoutKernel>(Device::kCpu)(x, 0.25, 42).ToFloats();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(y[i], DropoutKeep(42, i, 0.25) ? 1.0f / 0.75f : 0.0f) << i;
  }
}

TEST(KernelRegistryTest, TheFakeDeviceRunsEveryCpuKernelOnItsTensors) {
  testing::FakeDeviceBackend fake;  // mirrors the kernels registered so far
  EXPECT_TRUE(fake.HasKernel(OpId::kDropout));
  const Tensor x = Tensor::Full({64}, DType::kF32, 2.0);
  const Tensor on_device =
      Kernel<DropoutKernel>(Device::kCuda)(testing::FakeDeviceBackend::D(x.Clone()), 0.5, 9);
  EXPECT_EQ(on_device.device(), Device::kCuda);
  EXPECT_EQ(testing::FakeDeviceBackend::H(on_device).ToFloats(),
            Kernel<DropoutKernel>(Device::kCpu)(x, 0.5, 9).ToFloats());
  fake.missing = {OpId::kDropout};  // and a test can still take one away
  EXPECT_FALSE(fake.HasKernel(OpId::kDropout));
}

TEST(KernelRegistryTest, AnOpRegisteredOnlyForTheCpuIsMissingElsewhere) {
  testing::FakeDeviceBackend fake;          // constructed before the registration below
  EXPECT_TRUE(fake.HasKernel(OpId::kNeg));  // the unary kernels, mirrored
  ASSERT_TRUE(RegisterKernel<NegOnlyOnCpu>(Device::kCpu, &CpuNeg));
  EXPECT_TRUE(cpu::CpuBackend().HasKernel(OpId::kNeg));
  EXPECT_FALSE(fake.HasKernel(OpId::kNeg));  // neg now also needs a kernel it lacks
  EXPECT_STREQ(MissingKernelFor(OpId::kNeg, Device::kCuda), "neg_only_on_cpu");
  EXPECT_EQ(Kernel<NegOnlyOnCpu>(Device::kCpu)(Tensor::Full({2}, DType::kF32, 3.0)).ToFloats(),
            (std::vector<float>{-3, -3}));
  EXPECT_DEATH(Kernel<NegOnlyOnCpu>(Device::kCuda), "kernel neg_only_on_cpu has no CUDA version");
}

}  // namespace
}  // namespace ampd::engine
