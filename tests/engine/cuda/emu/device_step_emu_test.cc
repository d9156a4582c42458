// The CUDA backend's training step, run on the CPU emulator, counted: the
// host waits for the device once per step (the metrics read at its end),
// with gradient clipping too (the norm stays on the device), and never allocates or frees
// device memory once warmed up. This is the claim that the step does not
// synchronize like PyTorch's `.item()` / GradScaler.step, checked against
// the real backend code rather than a fake.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/engine/mlp_config.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::engine {

using backend::Backend;
using backend::BackendFor;
using backend::Kernel;
using backend::LinearKernel;
using optim::OptimizerSpec;
using train::StepMetrics;
using train::Trainer;
using train::TrainerConfig;

namespace {

TrainerConfig Config(const std::string& precision, double clip_norm) {
  TrainerConfig c = testing::MlpTrainerConfig(32, {64, 64}, 10, precision, Device::kCuda);
  c.optimizer.kind = OptimizerSpec::Kind::kAdamW;
  c.training.steps = 100;
  c.training.batch_size = 64;
  c.training.clip_norm = clip_norm;
  return c;
}

struct Counts {
  int64_t host_waits, launches, mallocs;
};

Counts Now() {
  const cudaemu::Counters c = cudaemu::GetCounters();
  return {c.host_waits, c.launches, cuda::CudaMemoryStats().device_allocations};
}

TEST(DeviceStepEmuTest, OneHostWaitPerStepAndNoAllocationOnceWarm) {
  ASSERT_TRUE(BackendFor(Device::kCuda).ok());
  for (const char* precision : {"16-mixed", "bf16-mixed", "32-true"}) {
    for (const double clip : {0.0, 0.5}) {
      auto trainer = Trainer::Create(Config(precision, clip),
                                     &testing::SyntheticData(2048, 32, 10, 5), nullptr);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      for (int i = 0; i < 3; ++i) (*trainer)->RunStep();  // warm up
      const Counts before = Now();
      constexpr int kSteps = 10;
      for (int i = 0; i < kSteps; ++i) {
        const StepMetrics m = (*trainer)->RunStep();
        ASSERT_FALSE(m.skipped) << precision;
      }
      const Counts after = Now();
      const std::string what = std::string(precision) + (clip > 0 ? " clipped" : "");
      EXPECT_EQ(after.host_waits - before.host_waits, kSteps) << what;  // clipped or not
      EXPECT_EQ(after.mallocs, before.mallocs) << what;
      // A two-layer MLP step is a few dozen launches (61 for bf16-mixed); a
      // launch per row or per tensor element would show here.
      EXPECT_GT(after.launches - before.launches, 0) << what;
      EXPECT_LE(after.launches - before.launches, 80 * kSteps) << what;
      std::printf("%s: %.1f kernel launches per step\n", what.c_str(),
                  static_cast<double>(after.launches - before.launches) / kSteps);
      ASSERT_TRUE((*BackendFor(Device::kCuda))->Health().ok());
    }
  }
}

// 8-bit AdamW and SGD states (every tensor in 8 bits here): the step still
// waits once and allocates nothing once warm, and all ten tensors' updates
// (the linears' and the norms') are one list launch, none of the one-tensor
// kernel.
TEST(DeviceStepEmuTest, EightBitStatesAreOneLaunchAStep) {
  ASSERT_TRUE(BackendFor(Device::kCuda).ok());
  for (const OptimizerSpec::Kind kind : {OptimizerSpec::Kind::kAdamW, OptimizerSpec::Kind::kSgd}) {
    const bool adamw = kind == OptimizerSpec::Kind::kAdamW;
    SCOPED_TRACE(adamw ? "adamw8bit" : "sgd8bit");
    TrainerConfig c = Config("bf16-mixed", 0.5);
    c.optimizer.kind = kind;
    c.optimizer.momentum = 0.9;
    c.optimizer.state_bits = 8;
    c.optimizer.min_8bit_size = 0;
    auto trainer = Trainer::Create(c, &testing::SyntheticData(2048, 32, 10, 5), nullptr);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    for (int i = 0; i < 3; ++i) (*trainer)->RunStep();
    const cudaemu::Counters before = cudaemu::GetCounters();
    const int64_t mallocs = cuda::CudaMemoryStats().device_allocations;
    constexpr int kSteps = 5;
    for (int i = 0; i < kSteps; ++i) ASSERT_FALSE((*trainer)->RunStep().skipped);
    cudaemu::Counters after = cudaemu::GetCounters();
    EXPECT_EQ(after.host_waits - before.host_waits, kSteps);
    EXPECT_EQ(cuda::CudaMemoryStats().device_allocations, mallocs);
    auto launches = [&](const char* kernel) {
      const auto was = before.launches_of.find(kernel);
      return after.launches_of[kernel] - (was == before.launches_of.end() ? 0 : was->second);
    };
    EXPECT_EQ(launches(adamw ? "AdamW8bitStepListKernel" : "Sgd8bitStepListKernel"), kSteps);
    EXPECT_EQ(launches(adamw ? "AdamW8bitStepKernel" : "Sgd8bitStepKernel"), 0);
    ASSERT_TRUE((*BackendFor(Device::kCuda))->Health().ok());
  }
}

// On a GPU whose cuBLASLt has no bias epilogue for a problem, Linear adds
// the bias after the GEMM instead of failing the job.
TEST(DeviceStepEmuTest, LinearAddsTheBiasItselfWhereCublasLtHasNoEpilogue) {
  Backend* gpu = *BackendFor(Device::kCuda);
  for (const DType d : {DType::kF32, DType::kBF16}) {
    std::vector<double> xv(24 * 40), wv(56 * 40), bv(56);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37 * i);
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.11 * i);
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.5 - 0.01 * i;
    const Tensor x = Tensor::FromDoubles(xv, {24, 40}, d), w = Tensor::FromDoubles(wv, {56, 40}, d),
                 b = Tensor::FromDoubles(bv, {56}, d);
    const std::vector<double> want = Kernel<LinearKernel>(Device::kCpu)(x, w, b, d).ToDoubles();
    for (const bool supported : {true, false}) {
      cudaemu::SetCublasLtEpiloguesSupported(supported);
      // A shape of its own per case: cuBLASLt's answer is kept per problem.
      const int64_t rows = supported ? 24 : 23;
      const Tensor xs = Tensor::FromDoubles(std::vector<double>(xv.begin(), xv.begin() + rows * 40),
                                            {rows, 40}, d);
      const std::vector<double> got =
          Kernel<LinearKernel>(Device::kCuda)(xs.To(Device::kCuda), w.To(Device::kCuda),
                                              b.To(Device::kCuda), d)
              .ToDoubles();
      ASSERT_TRUE(gpu->Health().ok()) << gpu->Health();
      ASSERT_EQ(got.size(), static_cast<size_t>(rows * 56));
      const double tol = d == DType::kF32 ? 1e-5 : 3e-2;
      for (int64_t i = 0; i < rows * 56; ++i) {
        ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i])))
            << DTypeName(d) << (supported ? " fused" : " unfused") << " element " << i;
      }
    }
    cudaemu::SetCublasLtEpiloguesSupported(true);
  }
}

}  // namespace
}  // namespace ampd::engine
