// The FP8 linear (ops/fp8_linear.h): on values that FP8 represents exactly
// it is the linear, forward and backward, bit for bit; each of its three
// casts records its tensor's amax in its own column; the scales are applied
// (saturation shows them); on ordinary values it is the linear to within
// FP8's rounding; under autocast it returns the region's dtype.
#include <cmath>
#include <random>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/fp8.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"

namespace ampd::engine {
namespace {

using autograd::Backward;
using ops::Fp8Linear;
using ops::Fp8LinearScaling;
using ops::Linear;
using ops::Mul;
using ops::Sum;

// Small multiples of 1/4 up to 4: exact in E4M3 (3 mantissa bits) and E5M2
// (2), and so are their products' sums in f32.
Tensor Exact(const std::vector<int64_t>& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> q(-8, 8);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = q(gen) * 0.25f;
  return Tensor::FromVector(v, shape, DType::kF32);
}

Tensor Uniform(const std::vector<int64_t>& shape, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return Tensor::FromVector(v, shape, DType::kF32);
}

Fp8LinearScaling Scaling(float scale = 1.0f, int64_t columns = 3, int64_t index = 0) {
  Fp8LinearScaling s;
  s.amax_history = Tensor::Zeros({4, columns}, DType::kF32);
  s.scales = Tensor::Full({columns}, DType::kF32, scale);
  s.scale_invs = Tensor::Full({columns}, DType::kF32, 1.0 / scale);
  s.index = index;
  return s;
}

TEST(Fp8LinearTest, OnExactlyRepresentableValuesItIsTheLinearBitForBit) {
  // The output gradient is the fixed weights ToScalar uses: exact too.
  const Tensor weights = Exact({6, 5}, 9);
  auto run = [&](bool fp8, Fp8LinearScaling* s) {
    Tensor x = Exact({6, 7}, 1).set_requires_grad(true);
    Tensor w = Exact({5, 7}, 2).set_requires_grad(true);
    Tensor b = Exact({5}, 3).set_requires_grad(true);
    Tensor y = fp8 ? Fp8Linear(x, w, b, *s) : Linear(x, w, b);
    Backward(Sum(Mul(y, weights)));
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
  };
  Fp8LinearScaling s = Scaling();
  const std::vector<Tensor> want = run(false, nullptr), got = run(true, &s);
  const char* names[] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].dtype(), want[i].dtype()) << names[i];
    EXPECT_EQ(got[i].ToDoubles(), want[i].ToDoubles()) << names[i];
  }
  // The amaxes of x, w and the output gradient, each in its column.
  const std::vector<double> h = s.amax_history.ToDoubles();
  EXPECT_EQ(h[0], 2.0);  // |x| <= 8 * 0.25, and the seed reaches it
  EXPECT_EQ(h[1], 2.0);
  EXPECT_EQ(h[2], 2.0);
  for (size_t i = 3; i < h.size(); ++i) EXPECT_EQ(h[i], 0.0) << i;  // older rows untouched
}

TEST(Fp8LinearTest, TheScalesAreAppliedAndSaturate) {
  // Scale 256 takes |x| = 2 to 512, past E4M3's 448: such values come back
  // as 448 / 256 = 1.75, so the product shows both the scale and its inverse.
  Tensor x = Tensor::FromVector({2.0f, 1.0f}, {1, 2}, DType::kF32);
  Tensor w = Tensor::FromVector({1.0f, 1.0f}, {1, 2}, DType::kF32);
  Fp8LinearScaling s = Scaling(256.0f);
  s.saturated = Tensor::Zeros({3}, DType::kF64);
  const Tensor y = Fp8Linear(x, w, Tensor(), s);
  EXPECT_EQ(y.ToDoubles(), (std::vector<double>{1.75 + 1.0}));
  // The one value clipped is counted in x's column; w's 256 fit.
  EXPECT_EQ(s.saturated.ToDoubles(), (std::vector<double>{1.0, 0.0, 0.0}));
  // Columns from an offset: another linear's scaling in the same tensors.
  Fp8LinearScaling t = Scaling(1.0f, 6, 3);
  Fp8Linear(x, w, Tensor(), t);
  const std::vector<double> h = t.amax_history.ToDoubles();
  EXPECT_EQ(h[0], 0.0);
  EXPECT_EQ(h[3], 2.0);
  EXPECT_EQ(h[4], 1.0);
}

// Current scaling: each tensor's scale comes from its own amax just before
// its cast, whatever the scales were; the saved codes decode with the scale
// they were cast with, even after other casts update the scales.
TEST(Fp8LinearTest, CurrentScalingSetsEachScaleFromItsOwnTensorFirst) {
  Tensor x = Tensor::FromVector({2.0f, -0.5f}, {1, 2}, DType::kF32).set_requires_grad(true);
  Tensor w = Tensor::FromVector({0.25f, 1.0f}, {1, 2}, DType::kF32).set_requires_grad(true);
  Fp8LinearScaling s;
  s.amax_history = Tensor::Zeros({1, 6}, DType::kF32);
  s.scales = Tensor::Full({6}, DType::kF32, 1e6);  // would saturate everything
  s.scale_invs = Tensor::Full({6}, DType::kF32, 1e-6);
  s.current = true;
  s.scaled_max = Tensor::FromVector({448, 448, 57344, 448, 448, 57344}, {6}, DType::kF32);
  const Tensor y = Fp8Linear(x, w, Tensor(), s);
  // x = (2, -0.5) at 224: (448, -112), both exact in E4M3; w = (0.25, 1) at
  // 448: (112, 448). So y is exact: 2 * 0.25 - 0.5 = 0.
  EXPECT_EQ(y.ToDoubles(), (std::vector<double>{0.0}));
  std::vector<double> scales = s.scales.ToDoubles();
  EXPECT_EQ(scales[0], 224.0);
  EXPECT_EQ(scales[1], 448.0);
  EXPECT_EQ(scales[3], 1e6f);  // another linear's columns: untouched
  // Another linear's current-scaled cast in between (columns 3..5) leaves x's
  // and w's scales as they are.
  Fp8LinearScaling other = s;
  other.index = 3;
  Fp8Linear(Tensor::FromVector({8.0f}, {1, 1}, DType::kF32),
            Tensor::FromVector({1.0f}, {1, 1}, DType::kF32), Tensor(), other);
  scales = s.scales.ToDoubles();
  EXPECT_EQ(scales[0], 224.0);
  EXPECT_EQ(scales[1], 448.0);
  EXPECT_EQ(scales[3], 56.0);
  // The backward: the output gradient's scale from its own amax (1 here:
  // 57344), and the gradients exact (codes decoded with the scales above).
  Backward(Sum(Mul(y, Tensor::FromVector({1.0f}, {1, 1}, DType::kF32))));
  EXPECT_EQ(s.scales.ToDoubles()[2], 57344.0);
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{0.25, 1.0}));
  EXPECT_EQ(w.grad().ToDoubles(), (std::vector<double>{2.0, -0.5}));
}

double RelativeError(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.ToDoubles(), w = want.ToDoubles();
  double err = 0, norm = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    err += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(err / norm);
}

TEST(Fp8LinearTest, OnOrdinaryValuesItIsTheLinearWithinFp8Rounding) {
  // Scales as delayed scaling would set them from these amaxes, a different
  // one per tensor (a mixed-up column would saturate or lose everything).
  const Tensor weights = Uniform({32, 16}, 6, 1.0f);
  auto run = [&](bool fp8) {
    Tensor x = Uniform({32, 64}, 4, 3.0f).set_requires_grad(true);
    Tensor w = Uniform({16, 64}, 5, 0.2f).set_requires_grad(true);
    Fp8LinearScaling s = Scaling();
    s.scales = Tensor::FromVector({448.0f / 3.0f, 448.0f / 0.2f, 57344.0f}, {3}, DType::kF32);
    s.scale_invs =
        Tensor::FromVector({3.0f / 448.0f, 0.2f / 448.0f, 1.0f / 57344.0f}, {3}, DType::kF32);
    Tensor y = fp8 ? Fp8Linear(x, w, Tensor(), s) : Linear(x, w, Tensor());
    Backward(Sum(Mul(y, weights)));
    return std::vector<Tensor>{y, x.grad(), w.grad()};
  };
  const std::vector<Tensor> got = run(true), want = run(false);
  // E4M3 rounds each value by up to 2^-4 relative, E5M2 (the gradient) by
  // 2^-3; over the GEMMs' sums the errors average out to a few percent.
  const double limits[] = {0.06, 0.1, 0.1};
  const char* names[] = {"y", "dx", "dw"};
  for (int i = 0; i < 3; ++i) {
    const double rel = RelativeError(got[i], want[i]);
    EXPECT_LT(rel, limits[i]) << names[i];
    EXPECT_GT(rel, 1e-4) << names[i];  // and it did quantize
  }
}

TEST(Fp8LinearTest, UnderAutocastItReturnsTheRegionsDtype) {
  ops::AutocastScope autocast(true, DType::kBF16);
  Tensor y = Fp8Linear(Exact({2, 3}, 6), Exact({4, 3}, 7), Exact({4}, 8), Scaling());
  EXPECT_EQ(y.dtype(), DType::kBF16);
}

}  // namespace
}  // namespace ampd::engine
