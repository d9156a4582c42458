// GPT-2's MLP as one op (ops/gelu_mlp.h): on the CPU it is bitwise the three
// ops it replaces, forward and every gradient, in f64, f32 and under bf16 and
// f16 autocast; it records the three ops' plan rows; and it runs as the three
// ops where they would not compute in one dtype.

#include "engine/ops/gelu_mlp.h"

#include <optional>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/backend/kernel_registry.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/engine/random_values.h"

namespace ampd::engine {
namespace {

using autograd::Backward;
using ops::AutocastOptions;
using ops::AutocastOverrides;
using ops::AutocastScope;
using ops::MlpLinear;
using ops::PlanRecorder;

Tensor RandomLeaf(const std::vector<int64_t>& shape, DType dtype, uint32_t seed, double sd) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor::FromDoubles(testing::RandomValues(n, seed, sd), shape, dtype)
      .set_requires_grad(true);
}

struct MlpRun {
  std::vector<Tensor> results;  // y, then the gradients of x, w1, b1, w2, b2
  std::vector<std::string> plan;
  OpId node = OpId::kCast;
};

// The MLP [M, C] -> [M, C] with hidden width 4C, fused or as the three ops,
// under `options` (no region when the dtype is f64 or f32 without autocast).
MlpRun RunMlp(bool fused, DType dtype, std::optional<AutocastOptions> options, bool bias = true) {
  const int64_t M = 24, C = 16;
  Tensor x = RandomLeaf({M, C}, dtype, 1, 1.0);
  Tensor w1 = RandomLeaf({4 * C, C}, dtype, 2, 0.3), b1 = RandomLeaf({4 * C}, dtype, 3, 0.3);
  Tensor w2 = RandomLeaf({C, 4 * C}, dtype, 4, 0.2), b2 = RandomLeaf({C}, dtype, 5, 0.2);
  Tensor r = RandomLeaf({M, C}, DType::kF32, 6, 1.0).set_requires_grad(false);
  if (!bias) b1 = b2 = Tensor();
  std::optional<AutocastScope> region;
  if (options) region.emplace(*options);
  MlpRun run;
  Tensor y;
  {
    PlanRecorder recorder;
    if (fused) {
      y = ops::GeluTanhMlp(x, MlpLinear{w1, b1, "mlp.c_fc"}, MlpLinear{w2, b2, "mlp.c_proj"});
    } else {
      Tensor h;
      {
        ops::LayerScope scope("mlp.c_fc");
        h = ops::Linear(x, w1, b1);
      }
      h = ops::GeluTanh(h);
      ops::LayerScope scope("mlp.c_proj");
      y = ops::Linear(h, w2, b2);
    }
    for (const ops::PlanEntry& e : recorder.entries()) {
      run.plan.push_back(e.op + " " + e.layer + " " + std::string(DTypeName(e.compute_dtype)) +
                         " " + std::string(DTypeName(e.output_dtype)));
    }
  }
  run.node = y.grad_fn()->op;
  Backward(ops::Sum(ops::Mul(y, r)));
  auto grad = [](const Tensor& t) { return t.defined() ? t.grad() : Tensor(); };
  run.results = {y, x.grad(), w1.grad(), grad(b1), w2.grad(), grad(b2)};
  return run;
}

void ExpectSame(const MlpRun& got, const MlpRun& want, const std::string& what) {
  const char* names[] = {"y", "dx", "dw1", "db1", "dw2", "db2"};
  for (size_t i = 0; i < want.results.size(); ++i) {
    const Tensor &g = got.results[i], &w = want.results[i];
    ASSERT_EQ(g.defined(), w.defined()) << what << " " << names[i];
    if (!w.defined()) continue;
    ASSERT_EQ(g.dtype(), w.dtype()) << what << " " << names[i];
    ASSERT_EQ(g.ToDoubles(), w.ToDoubles()) << what << " " << names[i];
  }
  EXPECT_EQ(got.plan, want.plan) << what;
}

TEST(GeluMlpTest, IsBitwiseTheThreeOpsOnTheCpu) {
  ASSERT_TRUE(backend::HasKernel(OpId::kGeluTanhMlp, Device::kCpu));
  struct Case {
    std::string name;
    DType dtype;
    std::optional<AutocastOptions> options;
  };
  const std::vector<Case> cases = {
      {"f64", DType::kF64, std::nullopt},
      {"f32", DType::kF32, std::nullopt},
      {"bf16 autocast", DType::kF32, AutocastOptions{true, DType::kBF16, AutocastOverrides{}}},
      {"f16 autocast", DType::kF32, AutocastOptions{true, DType::kF16, AutocastOverrides{}}},
  };
  for (const Case& c : cases) {
    for (bool bias : {true, false}) {
      const std::string what = c.name + (bias ? "" : ", no bias");
      const MlpRun fused = RunMlp(true, c.dtype, c.options, bias);
      const MlpRun ops = RunMlp(false, c.dtype, c.options, bias);
      EXPECT_EQ(fused.node, OpId::kGeluTanhMlp) << what << ": ran as one op";
      EXPECT_EQ(ops.node, OpId::kLinear) << what;
      ASSERT_EQ(fused.plan.size(), 3u) << what;
      ExpectSame(fused, ops, what);
    }
  }
  const MlpRun bf16 = RunMlp(true, DType::kF32, AutocastOptions{true, DType::kBF16, {}});
  EXPECT_EQ(bf16.plan,
            (std::vector<std::string>{"linear mlp.c_fc bf16 bf16", "gelu_tanh  bf16 bf16",
                                      "linear mlp.c_proj bf16 bf16"}));
}

// Overrides that put the three ops in different dtypes leave them unfused,
// with the overrides applied.
TEST(GeluMlpTest, RunsAsTheThreeOpsWhereOverridesSplitTheirDtypes) {
  AutocastOverrides layer;
  layer.fp32_layers.insert("mlp.c_proj");
  AutocastOverrides gelu;
  gelu.op_policies[OpId::kGeluTanh] = ops::CastPolicy::kFp32;
  for (const AutocastOverrides& o : {layer, gelu}) {
    const AutocastOptions options{true, DType::kBF16, o};
    const MlpRun got = RunMlp(true, DType::kF32, options);
    const MlpRun want = RunMlp(false, DType::kF32, options);
    EXPECT_EQ(got.node, OpId::kLinear);
    ExpectSame(got, want, "overridden");
    EXPECT_NE(got.plan, RunMlp(true, DType::kF32, AutocastOptions{true, DType::kBF16, {}}).plan);
  }
}

}  // namespace
}  // namespace ampd::engine
