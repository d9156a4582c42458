#include "engine/ops/autocast.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/engine/random_values.h"

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

Tensor RandomLeaf(const std::vector<int64_t>& shape, DType dtype, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor::FromDoubles(testing::RandomValues(n, seed), shape, dtype).set_requires_grad(true);
}

void ExpectBitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.ToDoubles(), want.ToDoubles()) << what;
}

// A residual add of a bf16 branch to the f32 stream reads the branch as it
// is (no f32 copy, no Cast node), with the results of casting it first, in
// the forward and in both gradients, broadcast operands included (their
// gradient summed in f32 and rounded once, as the Cast's gradient did).
TEST(AutocastTest, PromotedBinariesWidenInTheKernelWithTheResultsOfCastingFirst) {
  for (OpId op : {OpId::kAdd, OpId::kSub, OpId::kMul}) {
    for (const std::vector<int64_t>& bshape :
         std::vector<std::vector<int64_t>>{{33, 40}, {40}, {1}}) {
      const std::string what =
          absl::StrCat(ops::OpName(op), " f32[33, 40] with bf16[", bshape[0], "]");
      auto run = [&](bool cast_first) {
        Tensor a = RandomLeaf({33, 40}, DType::kF32, 1);
        Tensor b = RandomLeaf(bshape, DType::kBF16, 2);
        Tensor w = RandomLeaf({33, 40}, DType::kF32, 3).set_requires_grad(false);
        AutocastScope region(true);
        Tensor bb = cast_first ? ops::Cast(b, DType::kF32) : b;
        Tensor y = op == OpId::kAdd ? Add(a, bb) : op == OpId::kSub ? ops::Sub(a, bb) : Mul(a, bb);
        if (!cast_first) {
          // The kernel got the bf16 tensor itself.
          EXPECT_EQ(y.grad_fn()->inputs[1].impl(), b.impl()) << what;
        }
        Backward(Sum(Mul(y, w)));
        return std::vector<Tensor>{y, a.grad(), b.grad()};
      };
      const std::vector<Tensor> got = run(false), want = run(true);
      ExpectBitwise(got[0], want[0], what + ": forward");
      ExpectBitwise(got[1], want[1], what + ": gradient of a");
      ExpectBitwise(got[2], want[2], what + ": gradient of b");
    }
  }
  // A cast that narrows is still a Cast op: add in bf16 by override.
  AutocastOverrides o;
  o.op_policies[OpId::kAdd] = ops::CastPolicy::kLowerPrecision;
  AutocastScope region(AutocastOptions{true, DType::kBF16, o});
  Tensor y = Add(RandomLeaf({4}, DType::kF32, 4), RandomLeaf({4}, DType::kBF16, 5));
  EXPECT_EQ(y.dtype(), DType::kBF16);
  EXPECT_EQ(y.grad_fn()->inputs[0].dtype(), DType::kBF16);
  EXPECT_EQ(y.grad_fn()->inputs[0].grad_fn()->op, OpId::kCast);
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
