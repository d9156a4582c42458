// The fused LM head + cross-entropy equals linear (no bias) then
// cross_entropy, loss and gradients, whatever the chunking; under autocast it
// runs its GEMMs in bf16 and its softmax in f32.

#include "engine/ops/lm_head.h"

#include <cmath>
#include <random>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"

namespace ampd::engine::ops {
namespace {

Tensor Random(const std::vector<int64_t>& shape, uint32_t seed, DType dtype) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0, 1);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return Tensor::FromDoubles(v, shape, dtype);
}

struct Result {
  double loss;
  std::vector<double> dx, dw;
};

Result RunHead(bool fused, DType dtype, int64_t chunk, bool autocast = false) {
  Tensor x = Random({10, 6}, 1, dtype), w = Random({13, 6}, 2, dtype);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  const std::vector<int32_t> targets = {0, 12, 5, 5, 7, 1, 3, 11, 2, 9};
  Tensor loss;
  {
    AutocastScope scope(autocast, DType::kBF16);
    loss = fused ? LmHeadCrossEntropy(x, w, targets, chunk)
                 : SoftmaxCrossEntropy(Linear(x, w, Tensor()), targets);
  }
  autograd::Backward(loss);
  return {loss.ToDoubles()[0], x.grad().ToDoubles(), w.grad().ToDoubles()};
}

void ExpectNear(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << i;
}

// The cross-entropy backward kernel takes the upstream gradient as an f32
// (as torch's scaled losses are): the fused op's is g * rows / N per chunk,
// the unfused one's 1, so f64 gradients agree to f32's rounding of that.
TEST(LmHeadTest, EqualsLinearThenCrossEntropyForAnyChunking) {
  const Result want = RunHead(false, DType::kF64, 0);
  for (int64_t chunk : {1, 3, 4, 10, 1024}) {  // 4 leaves a short last chunk
    const Result got = RunHead(true, DType::kF64, chunk);
    EXPECT_NEAR(got.loss, want.loss, 1e-13) << chunk;
    ExpectNear(got.dx, want.dx, 1e-7);
    ExpectNear(got.dw, want.dw, 1e-7);
  }
  const Result f32 = RunHead(true, DType::kF32, 4), f32_want = RunHead(false, DType::kF32, 0);
  EXPECT_NEAR(f32.loss, f32_want.loss, 1e-6);
  ExpectNear(f32.dx, f32_want.dx, 1e-6);
  ExpectNear(f32.dw, f32_want.dw, 1e-6);
}

// Under autocast the GEMMs take bf16 inputs; the fused op keeps its logits in
// f32 (the unfused linear rounds them to bf16 first), so it is at least as
// close to the f32 result.
TEST(LmHeadTest, UnderAutocastItRunsTheGemmsInBf16AndTheLossInF32) {
  const Result f32 = RunHead(false, DType::kF32, 0);
  const Result fused = RunHead(true, DType::kF32, 4, true);
  const Result unfused = RunHead(false, DType::kF32, 0, true);
  EXPECT_NE(fused.loss, f32.loss);  // bf16 inputs: not the f32 computation
  EXPECT_NEAR(fused.loss, f32.loss, 1e-2 * std::fabs(f32.loss));
  EXPECT_NEAR(unfused.loss, f32.loss, 1e-2 * std::fabs(f32.loss));
  ExpectNear(fused.dx, f32.dx, 2e-2);
  ExpectNear(fused.dw, f32.dw, 2e-2);
}

}  // namespace
}  // namespace ampd::engine::ops
