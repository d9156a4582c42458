// The CPU's FP8 kernels (the reference the CUDA ones are tested against) do
// what backend/kernels/fp8.h says, in terms of the scalar conversions and the
// scaling rule that have their own tests (core/fp8_test, fp8_scaling_test).
#include <cmath>
#include <vector>

#include "engine/backend/kernels/fp8.h"
#include "engine/core/half.h"
#include "gtest/gtest.h"

namespace ampd::engine {
namespace {

using backend::Fp8CastKernel;
using backend::Fp8DecodeKernel;
using backend::Fp8UpdateScalingKernel;
using backend::Kernel;
using core::Fp8Format;

TEST(CpuFp8KernelsTest, CastRecordsTheAmaxAndDecodeScalesBack) {
  const std::vector<float> xs = {0.0f, -1.5f, 3.0f, 1000.0f, -0.001f, std::nanf(""), 2.0f};
  Tensor x = Tensor::FromVector(xs, {7}, DType::kF32);
  Tensor scales = Tensor::FromVector({1.0f, 2.0f}, {2}, DType::kF32);
  Tensor history = Tensor::Zeros({4, 2}, DType::kF32);
  history.data<float>()[1] = 5.0f;
  Tensor saturated = Tensor::Zeros({2}, DType::kF64);
  saturated.data<double>()[1] = 4;  // counted before: added to
  Tensor codes =
      Kernel<Fp8CastKernel>(Device::kCpu)(x, Fp8Format::kE4M3, scales, history, 1, saturated);
  ASSERT_EQ(codes.dtype(), DType::kU8);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(codes.data<uint8_t>()[i], core::F32ToFp8(xs[i] * 2.0f, Fp8Format::kE4M3, true)) << i;
  }
  EXPECT_EQ(codes.data<uint8_t>()[3], 0x7E);     // 2000 saturates to 448
  EXPECT_EQ(history.data<float>()[1], 1000.0f);  // max |x|, the NaN passed over
  EXPECT_EQ(history.data<float>()[0], 0.0f);     // another tensor's column
  // Clipped: 2000 (past 448); not the NaN, not 6 or 4.
  EXPECT_EQ(saturated.data<double>()[1], 4.0 + 1.0);
  EXPECT_EQ(saturated.data<double>()[0], 0.0);
  // Without a count tensor nothing is counted (and nothing breaks).
  Kernel<Fp8CastKernel>(Device::kCpu)(x, Fp8Format::kE4M3, scales, history, 1, Tensor());
  Tensor inv = Tensor::FromVector({1.0f, 0.5f}, {2}, DType::kF32);
  Tensor y = Kernel<Fp8DecodeKernel>(Device::kCpu)(codes, Fp8Format::kE4M3, inv, 1, DType::kBF16);
  EXPECT_EQ(core::BF16BitsToF32(y.data<uint16_t>()[2]), 3.0f);
  EXPECT_EQ(core::BF16BitsToF32(y.data<uint16_t>()[3]), 224.0f);  // 448 / 2
  EXPECT_TRUE(std::isnan(core::BF16BitsToF32(y.data<uint16_t>()[5])));
}

TEST(CpuFp8KernelsTest, TheUpdateIsTheColumnRuleForEveryColumn) {
  const int64_t len = 3, n = 2;
  std::vector<float> h = {1, 10, 4, 2, 8, 3};  // rows: this step, then older
  Tensor history = Tensor::FromVector(h, {len, n}, DType::kF32);
  Tensor scales = Tensor::FromVector({1, 1}, {n}, DType::kF32);
  Tensor invs = Tensor::Zeros({n}, DType::kF32);
  Tensor maxes = Tensor::FromVector({448, 57344}, {n}, DType::kF32);
  Kernel<Fp8UpdateScalingKernel>(Device::kCpu)(history, scales, invs, maxes, core::AmaxAlgo::kMax);
  EXPECT_EQ(scales.data<float>()[0], 448.0f / 8);
  EXPECT_EQ(scales.data<float>()[1], 57344.0f / 10);
  EXPECT_EQ(invs.data<float>()[0], 1.0f / (448.0f / 8));
  // Rolled: row 0 freed, this step's amax last, the oldest dropped.
  EXPECT_EQ(history.ToDoubles(), (std::vector<double>{0, 0, 8, 3, 1, 10}));
}

}  // namespace
}  // namespace ampd::engine
