// The CPU backend's AVX-512 kernels (engine/cpu/avx512_math.h): Exp16
// against libm, GELU tanh and causal attention (forward and backward) against
// f64 and against the portable loops they replace on CPUs without AVX-512,
// the AdamW update (32-bit and 8-bit states) bit for bit against them;
// the bf16 attention backward against f64 with its rounding points; the
// cached attention at these head sizes is in ops/attention_test. Each
// attention case uses head sizes the vector kernels take (16, 48, 64, 128)
// and 150 keys, so that three key tiles and a partial 16-key group are
// crossed. On a CPU without AVX-512 both sides are the portable loop and the
// f64 comparisons still hold.

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernel_registry.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/backend/kernels/layer_norm.h"
#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/backend/quant_map.h"
#include "engine/core/half.h"
#include "engine/cpu/adamw8bit_coder.h"
#include "engine/cpu/avx512_math.h"
#include "engine/cpu/capabilities.h"
#include "engine/cpu/vector_isa.h"
#include "engine/ops/attention.h"
#include "engine/ops/autocast.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/engine/random_values.h"

namespace ampd::engine::cpu {
namespace {

using testing::RandomValues;

// Equal specials (NaN, infinities), otherwise within rel * max(1, |want|).
bool Close(double got, double want, double rel) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

// Restores the CPU's own choice of kernels when a test ends.
class VectorKernelsTest : public ::testing::Test {
 protected:
  void TearDown() override { AllowAvx512Kernels(true); }
};

// Runs fn with the vector kernels allowed, then with the portable loops.
template <typename F>
auto BothPaths(const F& fn) {
  AllowAvx512Kernels(true);
  auto vector = fn();
  AllowAvx512Kernels(false);
  auto portable = fn();
  AllowAvx512Kernels(true);
  return std::make_pair(vector, portable);
}

#ifdef AMPD_HAS_AVX512_KERNELS
AMPD_AVX512 void Exp16Of(const float* x, float* y) {
  _mm512_storeu_ps(y, Exp16(_mm512_loadu_ps(x)));
}

int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

TEST_F(VectorKernelsTest, Exp16IsWithinTwoUlpOfLibmAndKeepsTheSpecialValues) {
  if (!UseAvx512Kernels()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::vector<float> x;
  for (double v = -87.0; v <= 88.5; v += 0.00731) x.push_back(static_cast<float>(v));
  const float inf = std::numeric_limits<float>::infinity();
  x.insert(x.end(), {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72f, 88.8f, 100.0f, 1e30f, inf, -inf, -103.0f,
                     -200.0f, std::numeric_limits<float>::quiet_NaN()});
  while (x.size() % 16 != 0) x.push_back(1.0f);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); i += 16) Exp16Of(x.data() + i, y.data() + i);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[i])) << x[i];
    } else if (std::isinf(want) || want < std::numeric_limits<float>::min()) {
      // Overflow and the denormal range: the right infinity or zero, or a
      // denormal within a few units of the last place.
      if (std::isinf(want)) {
        EXPECT_EQ(y[i], want) << x[i];
      } else {
        EXPECT_LE(std::fabs(y[i] - want), 8 * std::numeric_limits<float>::denorm_min()) << x[i];
      }
    } else {
      ASSERT_LE(UlpDistance(y[i], want), 2)
          << "exp(" << x[i] << ") = " << y[i] << ", libm " << want;
    }
  }
}
#endif

TEST_F(VectorKernelsTest, GeluTanhMatchesF64AndThePortableLoop) {
  std::vector<double> xs = RandomValues(4099, 1, 3.0);  // not a multiple of 16
  xs.insert(xs.end(), {0.0, 1e-20, -1e-20, 30.0, -30.0, 1e4, -1e4, INFINITY, -INFINITY, NAN});
  const std::vector<double> gs = RandomValues(xs.size(), 2);
  const int64_t n = static_cast<int64_t>(xs.size());
  auto run = [&](DType d) {
    Tensor x = Tensor::FromDoubles(xs, {n}, d);
    x.set_requires_grad(true);
    Tensor y = ops::GeluTanh(x);
    autograd::Backward(y, Tensor::FromDoubles(gs, {n}, d));
    return std::make_pair(y.ToDoubles(), x.grad().ToDoubles());
  };
  const auto [want_y, want_g] = run(DType::kF64);
  const auto [vector, portable] = BothPaths([&] { return run(DType::kF32); });
  for (int64_t i = 0; i < n; ++i) {
    for (const auto* got : {&vector, &portable}) {
      EXPECT_TRUE(Close(got->first[i], want_y[i], 4e-7))
          << "gelu(" << xs[i] << ") = " << got->first[i] << ", f64 " << want_y[i];
      EXPECT_TRUE(Close(got->second[i], want_g[i], 2e-6))
          << "gelu'(" << xs[i] << ") = " << got->second[i] << ", f64 " << want_g[i];
    }
  }
}

struct AttentionGrads {
  std::vector<double> y, dqkv;
};

AttentionGrads AttentionWithGrad(const std::vector<double>& qkv, const std::vector<double>& dy,
                                 int64_t B, int64_t T, int64_t C, int64_t H, DType d) {
  Tensor x = Tensor::FromDoubles(qkv, {B * T, 3 * C}, d);
  x.set_requires_grad(true);
  Tensor y = ops::CausalSelfAttention(x, T, H);
  autograd::Backward(y, Tensor::FromDoubles(dy, {B * T, C}, d));
  return {y.ToDoubles(), x.grad().ToDoubles()};
}

TEST_F(VectorKernelsTest, AttentionForwardAndBackwardMatchF64AndThePortableLoop) {
  const int64_t B = 2, T = 150;
  for (const int64_t D : {16, 48, 64, 128}) {
    const int64_t H = 2, C = H * D;
    const std::vector<double> qkv = RandomValues(B * T * 3 * C, 3 + D);
    const std::vector<double> dy = RandomValues(B * T * C, 4 + D);
    const AttentionGrads want = AttentionWithGrad(qkv, dy, B, T, C, H, DType::kF64);
    const auto [vector, portable] =
        BothPaths([&] { return AttentionWithGrad(qkv, dy, B, T, C, H, DType::kF32); });
    double worst_gap = 0;
    for (size_t i = 0; i < want.y.size(); ++i) {
      ASSERT_NEAR(vector.y[i], want.y[i], 2e-5 * std::max(1.0, std::fabs(want.y[i])))
          << "D " << D << " y " << i;
      worst_gap = std::max(worst_gap, std::fabs(vector.y[i] - portable.y[i]));
    }
    for (size_t i = 0; i < want.dqkv.size(); ++i) {
      ASSERT_NEAR(vector.dqkv[i], want.dqkv[i], 5e-5 * std::max(1.0, std::fabs(want.dqkv[i])))
          << "D " << D << " dqkv " << i;
      ASSERT_NEAR(portable.dqkv[i], want.dqkv[i], 5e-5 * std::max(1.0, std::fabs(want.dqkv[i])))
          << "D " << D << " dqkv " << i;
    }
    EXPECT_LT(worst_gap, 1e-5) << "D " << D;
  }
}

// The attention kernels share a task out as one sequence's heads when there
// are at least twice as many sequences as threads, else as one (sequence,
// head): B = 4 on one thread takes the first, on eight threads the second.
// Both, forward and backward, in f32 and in bf16, give the same bits.
TEST_F(VectorKernelsTest, AttentionIsTheSameWhicheverWayItsTasksAreCut) {
  const int64_t B = 4, T = 70, H = 3, D = 64, C = H * D;
  const std::vector<double> qkv = RandomValues(B * T * 3 * C, 31);
  const std::vector<double> dy = RandomValues(B * T * C, 32);
  const int threads = omp_get_max_threads();
  for (DType d : {DType::kF32, DType::kBF16}) {
    omp_set_num_threads(1);
    const AttentionGrads whole = AttentionWithGrad(qkv, dy, B, T, C, H, d);
    omp_set_num_threads(8);
    const AttentionGrads per_head = AttentionWithGrad(qkv, dy, B, T, C, H, d);
    omp_set_num_threads(threads);
    EXPECT_EQ(whole.y, per_head.y) << DTypeName(d);
    EXPECT_EQ(whole.dqkv, per_head.dqkv) << DTypeName(d);
  }
}

// Rounds to the nearest bf16 (ties to even), in double.
double Bf16(double x) { return core::BF16BitsToF32(core::F32ToBF16Bits(static_cast<float>(x))); }

// The backward of bf16 attention where oneDNN has a bf16 matmul rounds P and
// dS to bf16 before they meet K, Q and dO (as flash attention's backward on
// tensor cores); without one, the inputs are widened and P and dS stay f32.
// Either way the gradients are those of f64 arithmetic on the bf16 inputs
// with exactly those rounding points, to within the final rounding to bf16
// (and a little more, where a sum cancels), and within bf16 error of plain
// f64 attention.
TEST_F(VectorKernelsTest, Bf16AttentionBackwardIsF64WithItsRoundingPoints) {
  const int64_t B = 2, T = 150, H = 2, D = 64, C = H * D;
  const bool rounds_p = ProbeCpu().bf16_matmul;
  std::vector<double> qkv = RandomValues(B * T * 3 * C, 41);
  std::vector<double> dy = RandomValues(B * T * C, 42);
  for (double& v : qkv) v = Bf16(v);
  for (double& v : dy) v = Bf16(v);
  const AttentionGrads got = AttentionWithGrad(qkv, dy, B, T, C, H, DType::kBF16);
  const AttentionGrads f64 = AttentionWithGrad(qkv, dy, B, T, C, H, DType::kF64);
  // The reference, one (batch, head) at a time; O is the bf16 forward's.
  std::vector<double> want(B * T * 3 * C, 0.0);
  const double scale = 1.0 / std::sqrt(double(D));
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h) {
    return (b * T + t) * 3 * C + part * C + h * D;
  };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> p(T * T, 0.0), ds(T * T, 0.0);
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &qkv[at(b, i, 0, h)];
        std::vector<double> s(i + 1);
        double m = -std::numeric_limits<double>::infinity(), sum = 0, delta = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double* k = &qkv[at(b, j, 1, h)];
          s[j] = 0;
          for (int64_t d = 0; d < D; ++d) s[j] += q[d] * k[d];
          s[j] *= scale;
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - m);
        const double lse = m + std::log(sum);
        const double* go = &dy[(b * T + i) * C + h * D];
        for (int64_t d = 0; d < D; ++d) delta += go[d] * got.y[(b * T + i) * C + h * D + d];
        for (int64_t j = 0; j <= i; ++j) {
          const double* v = &qkv[at(b, j, 2, h)];
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) dp += go[d] * v[d];
          const double pij = std::exp(s[j] - lse);
          p[i * T + j] = rounds_p ? Bf16(pij) : pij;
          ds[i * T + j] = rounds_p ? Bf16(pij * (dp - delta) * scale) : pij * (dp - delta) * scale;
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < D; ++d) {
            want[at(b, i, 0, h) + d] += ds[i * T + j] * qkv[at(b, j, 1, h) + d];
            want[at(b, j, 1, h) + d] += ds[i * T + j] * qkv[at(b, i, 0, h) + d];
            want[at(b, j, 2, h) + d] += p[i * T + j] * dy[(b * T + i) * C + h * D + d];
          }
        }
      }
    }
  }
  // Nearly every gradient is the reference's, rounded to bf16 (a few differ
  // by an ulp where the f32 sums round P or dS the other way); all are within
  // two ulps of it, relative to the larger of the value and its tensor's rms
  // (a sum that cancels to near zero keeps the error of its terms). Against
  // plain f64 the kernel is only within bf16's error, so the exact share
  // there is low: it tells which rounding points the kernel has.
  double rms = 0;
  for (double v : want) rms += v * v;
  rms = std::sqrt(rms / want.size());
  double worst = 0, worst_f64 = 0;
  int64_t exact = 0, exact_f64 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(got.dqkv[i] - want[i]) / (std::fabs(want[i]) + rms));
    worst_f64 =
        std::max(worst_f64, std::fabs(got.dqkv[i] - f64.dqkv[i]) / (std::fabs(f64.dqkv[i]) + rms));
    exact += got.dqkv[i] == Bf16(want[i]);
    exact_f64 += got.dqkv[i] == Bf16(f64.dqkv[i]);
  }
  const double n = static_cast<double>(want.size());
  std::printf(
      "bf16 attention backward (P, dS rounded to bf16: %s): against those rounding points "
      "worst %.3g, %.4f exact; against f64 worst %.3g, %.4f exact\n",
      rounds_p ? "yes" : "no", worst, exact / n, worst_f64, exact_f64 / n);
  EXPECT_LT(worst, 1.0 / 128);
  EXPECT_GT(exact / n, 0.99);
  EXPECT_LT(worst_f64, 0.05);
}

struct LayerNormRun {
  std::vector<double> y, dx, dgamma, dbeta;
  bool operator==(const LayerNormRun& o) const {
    return y == o.y && dx == o.dx && dgamma == o.dgamma && dbeta == o.dbeta;
  }
};

LayerNormRun RunLayerNorm(int64_t rows, int64_t cols, DType d) {
  Tensor x = Tensor::FromDoubles(RandomValues(rows * cols, 11, 2.0), {rows, cols}, d);
  Tensor gamma = Tensor::FromDoubles(RandomValues(cols, 12), {cols}, DType::kF32);
  Tensor beta = Tensor::FromDoubles(RandomValues(cols, 13), {cols}, DType::kF32);
  for (Tensor* t : {&x, &gamma, &beta}) t->set_requires_grad(true);
  Tensor y = ops::LayerNorm(x, gamma, beta);
  autograd::Backward(y, Tensor::FromDoubles(RandomValues(rows * cols, 14), {rows, cols}, d));
  return {y.ToDoubles(), x.grad().ToDoubles(), gamma.grad().ToDoubles(), beta.grad().ToDoubles()};
}

// LayerNorm in f32 against f64, forward and dx, on both paths: 256 columns
// (a power of two: dx multiplies by 1 / cols), 320 and 48 (divides).
// Dropout's mask 16 at a time (dropout_mask.h) is DropoutKeep's, element
// for element: the kernel on both paths against the scalar rule, in f32 and
// bf16, at lengths with a partial group of 16, at a p whose threshold is
// exactly representable and one that is not. The attention paths above use
// the same mask.
TEST_F(VectorKernelsTest, DropoutIsDropoutKeepsMaskOnBothPaths) {
  auto dropout = backend::Kernel<backend::DropoutKernel>(Device::kCpu);
  for (DType d : {DType::kF32, DType::kBF16}) {
    for (double p : {0.5, 0.1, 0.37}) {
      const int64_t n = 70001;
      const Tensor x = Tensor::FromDoubles(RandomValues(n, 8), {n}, d);
      const std::vector<double> xs = x.ToDoubles();
      const auto [vector, portable] = BothPaths([&] { return dropout(x, p, 99).ToDoubles(); });
      const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = backend::DropoutKeep(99, i, p);
        kept += keep;
        const double want =
            keep ? (d == DType::kF32 ? static_cast<double>(static_cast<float>(xs[i]) * keep_scale)
                                     : static_cast<double>(core::BF16BitsToF32(core::F32ToBF16Bits(
                                           static_cast<float>(xs[i]) * keep_scale))))
                 : 0.0;
        ASSERT_EQ(vector[i], want) << DTypeName(d) << " p " << p << " at " << i;
        ASSERT_EQ(portable[i], want) << DTypeName(d) << " p " << p << " at " << i;
      }
      EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.01);
    }
  }
}

TEST_F(VectorKernelsTest, LayerNormMatchesF64OnBothPaths) {
  for (const int64_t cols : {256, 320, 48}) {
    const int64_t rows = 600;
    const LayerNormRun want = RunLayerNorm(rows, cols, DType::kF64);
    const auto [vector, portable] =
        BothPaths([&] { return RunLayerNorm(rows, cols, DType::kF32); });
    for (const LayerNormRun* got : {&vector, &portable}) {
      for (size_t i = 0; i < want.y.size(); ++i) {
        ASSERT_NEAR(got->y[i], want.y[i], 2e-6 * std::max(1.0, std::fabs(want.y[i])))
            << cols << " y " << i;
        ASSERT_NEAR(got->dx[i], want.dx[i], 2e-5 * std::max(1.0, std::fabs(want.dx[i])))
            << cols << " dx " << i;
      }
    }
  }
}

// A norm told that it feeds a bf16 linear (ops/layer_norm.h) writes bf16 and
// reads its bf16 gradient as it is: the forward and every gradient are the
// bits of the f32 norm cast by the linear, on both paths. 256 and 48 columns
// take the vector rows; 40 the portable ones on every CPU.
TEST_F(VectorKernelsTest, ANormFeedingABf16LinearGivesTheBitsOfCastingItsF32Result) {
  for (const int64_t cols : {256, 48, 40}) {
    const int64_t rows = 300;
    auto run = [&](bool fused) {
      Tensor x = Tensor::FromDoubles(RandomValues(rows * cols, 21, 2.0), {rows, cols}, DType::kF32);
      Tensor gamma = Tensor::FromDoubles(RandomValues(cols, 22), {cols}, DType::kF32);
      Tensor beta = Tensor::FromDoubles(RandomValues(cols, 23), {cols}, DType::kF32);
      Tensor w = Tensor::FromDoubles(RandomValues(24 * cols, 24), {24, cols}, DType::kF32);
      for (Tensor* t : {&x, &gamma, &beta, &w}) t->set_requires_grad(true);
      ops::AutocastScope region(true, DType::kBF16);
      const std::optional<DType> feeds =
          fused ? std::optional<DType>(DType::kBF16) : std::optional<DType>();
      Tensor h = ops::LayerNorm(x, gamma, beta, 1e-5, feeds);
      EXPECT_EQ(h.dtype(), fused ? DType::kBF16 : DType::kF32);
      Tensor y = ops::Linear(h, w, Tensor());
      autograd::Backward(
          y, Tensor::FromDoubles(RandomValues(rows * 24, 25), {rows, 24}, DType::kBF16));
      return std::vector<std::vector<double>>{y.ToDoubles(), x.grad().ToDoubles(),
                                              gamma.grad().ToDoubles(), beta.grad().ToDoubles(),
                                              w.grad().ToDoubles()};
    };
    const auto [vector_fused, portable_fused] = BothPaths([&] { return run(true); });
    const auto [vector_cast, portable_cast] = BothPaths([&] { return run(false); });
    const char* names[] = {"y", "dx", "dgamma", "dbeta", "dw"};
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(vector_fused[i], vector_cast[i]) << cols << " vector path " << names[i];
      EXPECT_EQ(portable_fused[i], portable_cast[i]) << cols << " portable path " << names[i];
    }
  }
}

// LayerNorm's dgamma/dbeta and SumRows (bias gradients) add each column in
// row order in double on both paths, so the vector kernels give the same
// bits; and none of LayerNorm's results or SumRows' depend on the number of
// threads. 320 columns: twenty 16-column groups; 48: three.
TEST_F(VectorKernelsTest, ColumnSumsAreBitwiseThePortableOnesAndIndependentOfThreads) {
  for (const int64_t cols : {320, 48}) {
    const int64_t rows = 1000;  // over kParallelMin elements: split across threads
    for (DType d : {DType::kF32, DType::kBF16}) {
      // The paths' forwards sum a row's mean and variance in different
      // orders, so the column sums are compared on one forward's results.
      const Tensor x = Tensor::FromDoubles(RandomValues(rows * cols, 11, 2.0), {rows, cols}, d);
      const Tensor gamma = Tensor::FromDoubles(RandomValues(cols, 12), {cols}, DType::kF32);
      const Tensor beta = Tensor::FromDoubles(RandomValues(cols, 13), {cols}, DType::kF32);
      const Tensor dy = Tensor::FromDoubles(RandomValues(rows * cols, 14), {rows, cols}, d);
      const backend::LayerNormResult fwd =
          backend::Kernel<backend::LayerNormKernel>(Device::kCpu)(x, gamma, beta, 1e-5, d);
      auto grads = [&] {
        const backend::LayerNormGrads g =
            backend::Kernel<backend::LayerNormBackwardKernel>(Device::kCpu)(x, gamma, fwd, dy);
        return std::make_pair(g.dgamma.ToDoubles(), g.dbeta.ToDoubles());
      };
      const auto [vector_grads, portable_grads] = BothPaths(grads);
      EXPECT_EQ(vector_grads.first, portable_grads.first) << cols << " " << DTypeName(d);
      EXPECT_EQ(vector_grads.second, portable_grads.second) << cols << " " << DTypeName(d);
      const LayerNormRun vector = RunLayerNorm(rows, cols, d);
      const Tensor m = Tensor::FromDoubles(RandomValues(rows * cols, 15), {rows, cols}, d);
      auto sum_rows = [&] {
        return backend::Kernel<backend::SumRowsKernel>(Device::kCpu)(m, DType::kF64).ToDoubles();
      };
      const auto [vector_sums, portable_sums] = BothPaths(sum_rows);
      EXPECT_EQ(vector_sums, portable_sums) << cols << " " << DTypeName(d);
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      const LayerNormRun one = RunLayerNorm(rows, cols, d);
      const std::vector<double> one_sums = sum_rows();
      omp_set_num_threads(threads);
      EXPECT_TRUE(one == vector) << cols << " " << DTypeName(d);
      EXPECT_EQ(one_sums, vector_sums) << cols << " " << DTypeName(d);
    }
  }
  // And the portable sums are the plain row-order sums.
  const std::vector<double> v = RandomValues(7 * 48, 16);
  const Tensor m = Tensor::FromDoubles(v, {7, 48}, DType::kF32);
  const std::vector<double> got =
      backend::Kernel<backend::SumRowsKernel>(Device::kCpu)(m, DType::kF64).ToDoubles();
  for (int64_t c = 0; c < 48; ++c) {
    double want = 0;
    for (int64_t r = 0; r < 7; ++r) want += static_cast<double>(static_cast<float>(v[r * 48 + c]));
    EXPECT_EQ(got[c], want) << c;
  }
}

// Clipping's sum of squares (DeviceAmp::SumOfSquares) over f32 tensors: the
// AVX-512 path, four chunks in lockstep, gives the portable chunked sum bit
// for bit, for any number of chunks (a partial group, a partial last chunk,
// a tail that is not a multiple of 8), on one thread and on all.
TEST_F(VectorKernelsTest, SumOfSquaresIsBitwiseThePortableOne) {
  backend::Backend* be = *backend::BackendFor(Device::kCpu);
  std::vector<Tensor> tensors;
  for (int64_t n : {int64_t{5}, int64_t{4096}, int64_t{32768}, int64_t{3 * 32768 + 4099},
                    int64_t{9 * 32768}, int64_t{(1 << 17) + 1001}}) {
    tensors.push_back(
        Tensor::FromDoubles(RandomValues(n, static_cast<uint32_t>(n), 2.0), {n}, DType::kF32));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::vector<Tensor> one = {tensors[i]};
    const auto [vector, portable] = BothPaths([&] { return be->SumOfSquares(one); });
    EXPECT_EQ(vector, portable) << tensors[i].numel();
    EXPECT_GT(vector, 0);
  }
  const auto [vector, portable] = BothPaths([&] { return be->SumOfSquares(tensors); });
  EXPECT_EQ(vector, portable);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one_thread = be->SumOfSquares(tensors);
  omp_set_num_threads(threads);
  EXPECT_EQ(one_thread, vector);
}

// Three AdamW steps (weight decay, bias corrections) on 5000 values (blocks
// of 2048 and 256 and a partial 16-lane chunk), with
// 32-bit states and with 8-bit ones, each run with the AVX-512 update and
// with the portable loop: the same parameters, moments and codes, bit for bit.
TEST_F(VectorKernelsTest, AdamWStepsAreBitwiseThePortableOnes) {
  const int64_t n = 5000;
  backend::Backend* be = *backend::BackendFor(Device::kCpu);
  backend::DeviceAmp::AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  struct Run {
    std::vector<double> param, m, v, m_codes, v_codes, m_absmax, v_absmax;
    bool operator==(const Run& o) const {
      return param == o.param && m == o.m && v == o.v && m_codes == o.m_codes &&
             v_codes == o.v_codes && m_absmax == o.m_absmax && v_absmax == o.v_absmax;
    }
  };
  auto run = [&](bool eight_bit) {
    Tensor p = Tensor::FromDoubles(RandomValues(n, 20), {n}, DType::kF32);
    Tensor m = Tensor::Zeros({n}, DType::kF32), v = Tensor::Zeros({n}, DType::kF32);
    const int64_t blocks = backend::QuantBlocks(n);
    Tensor mc = Tensor::Zeros({n}, DType::kU8), vc = Tensor::Zeros({n}, DType::kU8);
    Tensor ma = Tensor::Zeros({blocks}, DType::kF32), va = Tensor::Zeros({blocks}, DType::kF32);
    for (int step = 1; step <= 3; ++step) {
      const Tensor g = Tensor::FromDoubles(RandomValues(n, 20 + step, 0.1), {n}, DType::kF32);
      h.step = step;
      if (eight_bit) {
        backend::Kernel<backend::AdamW8bitStepKernel>(Device::kCpu)(
            p, g, mc, ma, vc, va, h, backend::DeviceAmp::FusedStepArgs{});
      } else {
        be->AdamWStep(p, g, m, v, h);
      }
    }
    return Run{p.ToDoubles(),  m.ToDoubles(),  v.ToDoubles(), mc.ToDoubles(),
               vc.ToDoubles(), ma.ToDoubles(), va.ToDoubles()};
  };
  for (bool eight_bit : {false, true}) {
    for (FusedCoder coder : {FusedCoder::kSearch, FusedCoder::kGather}) {
      SetFusedCoder(coder);
      const auto [vector, portable] = BothPaths([&] { return run(eight_bit); });
      EXPECT_TRUE(vector == portable)
          << (eight_bit ? "8-bit states, " : "32-bit states, ") << FusedCoderName(coder);
      // And the steps moved the parameters.
      EXPECT_NE(vector.param,
                Tensor::FromDoubles(RandomValues(n, 20), {n}, DType::kF32).ToDoubles())
          << eight_bit;
    }
  }
  SetFusedCoder(FusedCoder::kAuto);
  EXPECT_NE(ResolvedFusedCoder(), FusedCoder::kAuto);
}

// The fused 8-bit block (optimizers8bit.cc) hands blocks it cannot code
// itself to QuantizeBlocks: a block of zero gradients (absmax 0 throughout)
// and one whose squares overflow (an infinite second moment). Both paths
// still agree bit for bit, and the ordinary blocks around them too.
TEST_F(VectorKernelsTest, EightBitAdamWBlocksWithZeroOrInfiniteMomentsAreThePortableOnes) {
  const int64_t n = 2048;
  backend::DeviceAmp::AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  h.step = 1;
  std::vector<double> g = RandomValues(n, 31, 0.1);
  for (int64_t i = 256; i < 512; ++i) g[i] = 0;                          // block 1: zeros
  for (int64_t i = 1024; i < 1280; ++i) g[i] = (i % 2 ? 1 : -1) * 1e30;  // block 4: g^2 = inf
  auto run = [&] {
    Tensor p = Tensor::FromDoubles(RandomValues(n, 30), {n}, DType::kF32);
    const int64_t blocks = backend::QuantBlocks(n);
    Tensor mc = Tensor::Zeros({n}, DType::kU8), vc = Tensor::Zeros({n}, DType::kU8);
    Tensor ma = Tensor::Zeros({blocks}, DType::kF32), va = Tensor::Zeros({blocks}, DType::kF32);
    backend::Kernel<backend::AdamW8bitStepKernel>(Device::kCpu)(
        p, Tensor::FromDoubles(g, {n}, DType::kF32), mc, ma, vc, va, h,
        backend::DeviceAmp::FusedStepArgs{});
    return std::vector<std::vector<double>>{p.ToDoubles(), mc.ToDoubles(), vc.ToDoubles(),
                                            ma.ToDoubles(), va.ToDoubles()};
  };
  for (FusedCoder coder : {FusedCoder::kSearch, FusedCoder::kGather}) {
    SetFusedCoder(coder);
    const auto [vector, portable] = BothPaths(run);
    EXPECT_EQ(vector, portable) << FusedCoderName(coder);
    EXPECT_EQ(vector[3][1], 0.0) << "the zero block's first moment";
    EXPECT_TRUE(std::isinf(vector[4][4])) << "the overflowing block's second moment";
    for (double x : vector[0]) ASSERT_TRUE(std::isfinite(x));
  }
  SetFusedCoder(FusedCoder::kAuto);
}

}  // namespace
}  // namespace ampd::engine::cpu
