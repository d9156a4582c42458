#include "engine/ops/autocast.h"

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using autograd::Backward;
using ops::Add;
using ops::AddInPlace;
using ops::AutocastCacheSize;
using ops::AutocastDepth;
using ops::AutocastEnabled;
using ops::AutocastOptions;
using ops::AutocastOverrides;
using ops::AutocastScope;
using ops::Exp;
using ops::Gelu;
using ops::LayerNorm;
using ops::LayerScope;
using ops::Linear;
using ops::LogSoftmax;
using ops::Matmul;
using ops::Mean;
using ops::Mul;
using ops::PlanEntry;
using ops::PlanRecorder;
using ops::Relu;
using ops::Softmax;
using ops::SoftmaxCrossEntropy;
using ops::Sum;

namespace {

Tensor Param(std::vector<int64_t> shape, float v = 0.5f) {
  return Tensor::Full(shape, DType::kF32, v).set_requires_grad(true);
}

TEST(AutocastTest, LowerPrecisionOpsRunInTheRegionDtype) {
  Tensor x = Tensor::Full({2, 3}, DType::kF32, 1.0);
  Tensor w = Param({4, 3});
  {
    AutocastScope region(true, DType::kBF16);
    EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kBF16);
    EXPECT_EQ(Matmul(x, Tensor::Full({3, 2}, DType::kF32, 1.0)).dtype(), DType::kBF16);
  }
  {
    AutocastScope region(true, DType::kF16);
    EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kF16);
  }
  EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kF32);
}

TEST(AutocastTest, Fp32OpsUpcastLowPrecisionInputs) {
  Tensor h = Tensor::Full({2, 3}, DType::kBF16, 1.0);
  AutocastScope region(true);
  EXPECT_EQ(Softmax(h).dtype(), DType::kF32);
  EXPECT_EQ(LogSoftmax(h).dtype(), DType::kF32);
  EXPECT_EQ(Exp(h).dtype(), DType::kF32);
  EXPECT_EQ(Sum(h).dtype(), DType::kF32);
  EXPECT_EQ(Mean(h).dtype(), DType::kF32);
  EXPECT_EQ(SoftmaxCrossEntropy(h, {0, 1}).dtype(), DType::kF32);
  EXPECT_EQ(LayerNorm(h, Param({3}), Param({3})).dtype(), DType::kF32);
}

TEST(AutocastTest, PromoteOpsUseTheWidestInput) {
  Tensor lo = Tensor::Full({2, 3}, DType::kBF16, 1.0);
  Tensor hi = Tensor::Full({2, 3}, DType::kF32, 1.0);
  AutocastScope region(true);
  EXPECT_EQ(Add(lo, hi).dtype(), DType::kF32);
  EXPECT_EQ(Mul(lo, lo).dtype(), DType::kBF16);
  EXPECT_EQ(Add(Tensor::Full({2, 3}, DType::kF16, 1.0), lo).dtype(), DType::kF32);
}

TEST(AutocastTest, PassThroughOpsKeepTheInputDtype) {
  AutocastScope region(true);
  EXPECT_EQ(Relu(Tensor::Full({2}, DType::kBF16, 1.0)).dtype(), DType::kBF16);
  EXPECT_EQ(Gelu(Tensor::Full({2}, DType::kF32, 1.0)).dtype(), DType::kF32);
}

TEST(AutocastTest, Fp64InputsAreNeverAutocast) {
  Tensor x = Tensor::Full({2, 3}, DType::kF64, 1.0);
  Tensor w = Tensor::Full({4, 3}, DType::kF64, 1.0);
  AutocastScope region(true);
  EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kF64);
}

TEST(AutocastTest, InPlaceOpsAreNeverAutocast) {
  Tensor x = Tensor::Full({3}, DType::kF32, 1.0);
  Tensor y = Tensor::Full({3}, DType::kF32, 1.0 / 3.0);
  AutocastScope region(true, DType::kBF16);
  AddInPlace(x, y);
  EXPECT_EQ(x.dtype(), DType::kF32);
  // f32 arithmetic, not bf16: 1 + 1/3 rounded to bf16 would be 1.3359375.
  EXPECT_FLOAT_EQ(x.ToFloats()[0], 1.0f + 1.0f / 3.0f);
}

TEST(AutocastTest, RegionsNestAndTheInnermostWins) {
  Tensor x = Tensor::Full({2, 3}, DType::kF32, 1.0);
  Tensor w = Param({4, 3});
  AutocastScope outer(true, DType::kBF16);
  EXPECT_EQ(AutocastDepth(), 1);
  {
    AutocastScope inner(false);
    EXPECT_FALSE(AutocastEnabled());
    EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kF32);
    {
      AutocastScope innermost(true, DType::kF16);
      EXPECT_EQ(AutocastDepth(), 3);
      EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kF16);
    }
  }
  EXPECT_TRUE(AutocastEnabled());
  EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kBF16);
}

TEST(AutocastTest, PerOpAndPerLayerOverrides) {
  Tensor x = Tensor::Full({2, 3}, DType::kF32, 1.0);
  Tensor w = Param({3, 3});
  AutocastOptions options;
  options.overrides = AutocastOverrides{};
  options.overrides->fp32_layers.insert("head");
  options.overrides->op_policies[OpId::kMatmul] = CastPolicy::kFp32;
  AutocastScope region(options);
  {
    LayerScope layer("fc1");
    EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kBF16);
  }
  {
    LayerScope layer("head");
    EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kF32);
  }
  EXPECT_EQ(Matmul(x, w).dtype(), DType::kF32);
  {
    // A nested region without overrides inherits them.
    AutocastScope inner(true, DType::kF16);
    LayerScope layer("head");
    EXPECT_EQ(Linear(x, w, Tensor()).dtype(), DType::kF32);
  }
}

TEST(AutocastTest, ParameterCastsAreCachedAndClearedWhenTheOutermostRegionExits) {
  Tensor w = Param({3, 3});
  Tensor x = Tensor::Full({2, 3}, DType::kF32, 1.0);
  for (int step = 0; step < 1000; ++step) {
    AutocastScope region(true);
    Tensor a = Linear(x, w, Tensor());
    Tensor b = Linear(x, w, Tensor());
    {
      AutocastScope nested(true);
      Linear(x, w, Tensor());
    }
    // One cached copy for the one parameter, reused by all three calls.
    ASSERT_EQ(AutocastCacheSize(), 1u) << "step " << step;
    Backward(Sum(Add(a, b)));
  }
  EXPECT_EQ(AutocastCacheSize(), 0u);
  // Gradients flow back through the cached cast to the f32 parameter.
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::kF32);
  // Non-parameters (no requires_grad) are never cached.
  AutocastScope region(true);
  Linear(x, Tensor::Full({3, 3}, DType::kF32, 1.0), Tensor());
  EXPECT_EQ(AutocastCacheSize(), 0u);
}

TEST(AutocastTest, PlanRecorderReportsEachOp) {
  Tensor x = Tensor::Full({2, 3}, DType::kF32, 1.0);
  PlanRecorder recorder;
  AutocastScope region(true);
  LayerScope layer("fc1");
  Tensor y = Softmax(Relu(Linear(x, Param({4, 3}), Param({4}))));
  ASSERT_EQ(recorder.entries().size(), 3u);
  const PlanEntry& linear = recorder.entries()[0];
  EXPECT_EQ(linear.op, "linear");
  EXPECT_EQ(linear.layer, "fc1");
  EXPECT_EQ(linear.policy, CastPolicy::kLowerPrecision);
  EXPECT_EQ(linear.input_dtypes, (std::vector<DType>{DType::kF32, DType::kF32, DType::kF32}));
  EXPECT_EQ(linear.compute_dtype, DType::kBF16);
  EXPECT_EQ(linear.output_dtype, DType::kBF16);
  EXPECT_EQ(recorder.entries()[1].op, "relu");
  EXPECT_EQ(recorder.entries()[1].output_dtype, DType::kBF16);
  EXPECT_EQ(recorder.entries()[2].policy, CastPolicy::kFp32);
  EXPECT_EQ(recorder.entries()[2].output_dtype, DType::kF32);
}

TEST(AutocastTest, LowPrecisionGradientsMatchF32WithinBf16Tolerance) {
  Tensor x = Tensor::FromVector({0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f}, {2, 3});
  Tensor w32 = Tensor::FromVector({0.1f, 0.2f, 0.3f, -0.1f, 0.5f, 0.25f}, {2, 3});
  w32.set_requires_grad(true);
  Backward(SoftmaxCrossEntropy(Linear(x, w32, Tensor()), {0, 1}));
  std::vector<float> ref = w32.grad().ToFloats();
  Tensor w = Tensor::FromVector({0.1f, 0.2f, 0.3f, -0.1f, 0.5f, 0.25f}, {2, 3});
  w.set_requires_grad(true);
  {
    AutocastScope region(true);
    Backward(SoftmaxCrossEntropy(Linear(x, w, Tensor()), {0, 1}));
  }
  std::vector<float> got = w.grad().ToFloats();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-2) << i;
}

}  // namespace
}  // namespace ampd::engine
