// The fused causal self-attention against a naive reference that builds the
// whole T x T probability matrix (PyTorch's SDPA math path), over several key
// tiles, with and without dropout on the probabilities; future tokens never
// change past outputs; and autocast runs it in the low-precision dtype.

#include "engine/ops/attention.h"

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "engine/backend/kernel_registry.h"
#include "engine/backend/kernels/attention.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/ops/autocast.h"
#include "gtest/gtest.h"
#include "tests/engine/random_values.h"

namespace ampd::engine::ops {
namespace {

using testing::RandomValues;

// softmax(q k^T / sqrt(D) masked to j <= i) v, with the full matrix; with
// dropout p > 0, probability (b, h, i, j) is kept by dropout's own rule
// (backend::DropoutKeep) at index ((b H + h) T + i) T + j, scaled by 1/(1-p).
std::vector<double> NaiveAttention(const std::vector<double>& x, int64_t B, int64_t T, int64_t C,
                                   int64_t H, double dropout = 0, uint64_t seed = 0) {
  const int64_t D = C / H;
  std::vector<double> y(B * T * C);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> p(T * T, 0.0);
      for (int64_t i = 0; i < T; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) {
            s += x[(b * T + i) * 3 * C + h * D + d] * x[(b * T + j) * 3 * C + C + h * D + d];
          }
          p[i * T + j] = s / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, p[i * T + j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (p[i * T + j] = std::exp(p[i * T + j] - mx));
        for (int64_t j = 0; j <= i; ++j) p[i * T + j] /= sum;
        if (dropout > 0) {
          for (int64_t j = 0; j <= i; ++j) {
            const uint64_t index = static_cast<uint64_t>(((b * H + h) * T + i) * T + j);
            p[i * T + j] =
                backend::DropoutKeep(seed, index, dropout) ? p[i * T + j] / (1 - dropout) : 0.0;
          }
        }
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) {
            acc += p[i * T + j] * x[(b * T + j) * 3 * C + 2 * C + h * D + d];
          }
          y[(b * T + i) * C + h * D + d] = acc;
        }
      }
    }
  }
  return y;
}

TEST(AttentionTest, MatchesTheFullMatrixReferenceAcrossKeyTiles) {
  const int64_t B = 2, T = 150, C = 16, H = 4;  // 150 keys: three tiles of 64
  const std::vector<double> x = RandomValues(B * T * 3 * C, 1);
  const std::vector<double> want = NaiveAttention(x, B, T, C, H);
  const std::vector<double> f64 =
      CausalSelfAttention(Tensor::FromDoubles(x, {B * T, 3 * C}, DType::kF64), T, H).ToDoubles();
  const std::vector<double> f32 =
      CausalSelfAttention(Tensor::FromDoubles(x, {B * T, 3 * C}, DType::kF32), T, H).ToDoubles();
  ASSERT_EQ(f64.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(f64[i], want[i], 1e-12) << i;
    ASSERT_NEAR(f32[i], want[i], 2e-5 * std::max(1.0, std::fabs(want[i]))) << i;
  }
}

// Dropout on the probabilities, as SDPA's dropout_p: the CPU's every path
// (f64's portable loop, f32's AVX-512 rows with heads of 32 and the
// portable f32 loop with heads of 4) drops the reference's probabilities.
TEST(AttentionTest, DropoutDropsTheReferencesProbabilities) {
  const int64_t B = 2, T = 150;
  const double p = 0.3;
  const uint64_t seed = 77;
  for (const auto& [C, H] : {std::pair<int64_t, int64_t>{16, 4}, {64, 2}}) {
    const std::vector<double> x = RandomValues(B * T * 3 * C, 11);
    const std::vector<double> want = NaiveAttention(x, B, T, C, H, p, seed);
    const std::vector<double> undropped = NaiveAttention(x, B, T, C, H);
    const std::vector<double> f64 =
        CausalSelfAttention(Tensor::FromDoubles(x, {B * T, 3 * C}, DType::kF64), T, H, p, seed)
            .ToDoubles();
    const std::vector<double> f32 =
        CausalSelfAttention(Tensor::FromDoubles(x, {B * T, 3 * C}, DType::kF32), T, H, p, seed)
            .ToDoubles();
    double changed = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(f64[i], want[i], 1e-12) << "C " << C << " at " << i;
      ASSERT_NEAR(f32[i], want[i], 2e-5 * std::max(1.0, std::fabs(want[i])))
          << "C " << C << " at " << i;
      changed = std::max(changed, std::fabs(want[i] - undropped[i]));
    }
    EXPECT_GT(changed, 0.1) << "the reference's dropout changes nothing";
  }
}

// The mask keeps 1 - p of the probabilities, is a function of the seed, and
// p = 0 is no dropout, bit for bit.
TEST(AttentionTest, DropoutMaskIsSeededAndKeepsOneMinusP) {
  const backend::AttentionDropout d{0.25, 5};
  int64_t kept = 0;
  const int64_t n = 200000;
  for (int64_t i = 0; i < n; ++i) kept += backend::AttentionKeep(d.seed, d.Threshold(), i);
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.005);
  const int64_t B = 1, T = 40, C = 64, H = 2;
  const Tensor x =
      Tensor::FromDoubles(RandomValues(B * T * 3 * C, 12), {B * T, 3 * C}, DType::kF32);
  const std::vector<double> plain = CausalSelfAttention(x, T, H).ToDoubles();
  EXPECT_EQ(CausalSelfAttention(x, T, H, 0.0, 5).ToDoubles(), plain);
  const std::vector<double> a = CausalSelfAttention(x, T, H, 0.25, 5).ToDoubles();
  EXPECT_EQ(CausalSelfAttention(x, T, H, 0.25, 5).ToDoubles(), a);
  EXPECT_NE(CausalSelfAttention(x, T, H, 0.25, 6).ToDoubles(), a);
  EXPECT_NE(a, plain);
}

// The backward regenerates the forward's mask: f32's GEMM path and bf16's
// (bf16 GEMMs where oneDNN has them) against the f64 loop, whose gradient is
// checked by finite differences (ops_grad_test); and the mask matters there.
TEST(AttentionTest, DropoutBackwardOnEveryPathAgreesWithF64) {
  const int64_t B = 2, T = 100, C = 64, H = 2;
  const backend::AttentionDropout drop{0.3, 21};
  const std::vector<double> xv = RandomValues(B * T * 3 * C, 13), gv = RandomValues(B * T * C, 14);
  auto forward = backend::Kernel<backend::CausalAttentionKernel>(Device::kCpu);
  auto backward = backend::Kernel<backend::CausalAttentionBackwardKernel>(Device::kCpu);
  auto grad = [&](DType d, const backend::AttentionDropout& dr) {
    const Tensor x = Tensor::FromDoubles(xv, {B * T, 3 * C}, d);
    const Tensor g = Tensor::FromDoubles(gv, {B * T, C}, d);
    const backend::AttentionResult r = forward(x, T, H, dr);
    return backward(x, r.y, r.lse, g, T, H, dr).ToDoubles();
  };
  const std::vector<double> want = grad(DType::kF64, drop);
  const std::vector<double> undropped = grad(DType::kF64, {});
  const std::vector<double> f32 = grad(DType::kF32, drop);
  const std::vector<double> bf16 = grad(DType::kBF16, drop);
  double scale = 0, off = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    off = std::max(off, std::fabs(want[i] - undropped[i]));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(f32[i], want[i], 1e-5 * scale) << i;
    ASSERT_NEAR(bf16[i], want[i], 0.05 * scale) << i;
  }
  EXPECT_GT(off, 0.3 * scale) << "the mask changes the gradient";
}

TEST(AttentionTest, AFutureTokenNeverChangesAPastOutput) {
  const int64_t B = 1, T = 20, C = 8, H = 2;
  std::vector<double> x = RandomValues(B * T * 3 * C, 2);
  const std::vector<double> before =
      CausalSelfAttention(Tensor::FromDoubles(x, {B * T, 3 * C}, DType::kF32), T, H).ToDoubles();
  for (int64_t c = 0; c < 3 * C; ++c) x[12 * 3 * C + c] += 5.0;  // token 12's q, k and v
  const std::vector<double> after =
      CausalSelfAttention(Tensor::FromDoubles(x, {B * T, 3 * C}, DType::kF32), T, H).ToDoubles();
  for (int64_t i = 0; i < 12 * C; ++i) EXPECT_EQ(after[i], before[i]) << i;
  EXPECT_NE(after[12 * C], before[12 * C]);
  EXPECT_NE(after[19 * C], before[19 * C]);
}

TEST(AttentionTest, AutocastRunsItInTheLowPrecisionDtype) {
  const Tensor x = Tensor::FromDoubles(RandomValues(2 * 4 * 24, 3), {2 * 4, 24}, DType::kF32);
  AutocastOptions o;
  o.enabled = true;
  o.dtype = DType::kBF16;
  AutocastScope scope(o);
  EXPECT_EQ(CausalSelfAttention(x, 4, 2).dtype(), DType::kBF16);
}

}  // namespace
}  // namespace ampd::engine::ops

namespace ampd::engine::ops {
namespace {

// The rows [begin, begin + n) of each of B sequences of T rows.
Tensor SequenceRows(const Tensor& x, int64_t B, int64_t T, int64_t begin, int64_t n) {
  std::vector<double> all = x.ToDoubles(), out;
  const int64_t w = x.dim(1);
  for (int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), all.begin() + (b * T + begin) * w, all.begin() + (b * T + begin + n) * w);
  }
  return Tensor::FromDoubles(out, {B * n, w}, x.dtype());
}

// Generation's cached attention: a prompt, then one row at a time, gives the
// whole-sequence attention's rows bit for bit (the same tiles, the same
// order), across key tiles (T = 150 > 64), in f32 and bf16; with heads of 8
// channels (the portable loop) and of 64 (the AVX-512 kernels, where the CPU
// has them: engine/cpu/vector_isa.h).
TEST(CachedSelfAttentionTest, EqualsTheWholeSequenceBitForBit) {
  const int64_t B = 2, T = 150;
  for (const auto& [C, H] : {std::pair<int64_t, int64_t>{32, 4}, {128, 2}})
    for (DType d : {DType::kF32, DType::kBF16, DType::kF64}) {
      const Tensor qkv = Tensor::FromDoubles(RandomValues(B * T * 3 * C, 7), {B * T, 3 * C}, d);
      const std::vector<double> full = CausalSelfAttention(qkv, T, H).ToDoubles();
      KvCache cache;
      for (int64_t past = 0; past < T;) {
        const int64_t n = past == 0 ? 70 : 1;
        const Tensor y = CachedSelfAttention(SequenceRows(qkv, B, T, past, n), &cache, B, T, H);
        const std::vector<double> got = y.ToDoubles();
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t c = 0; c < C; ++c) {
              ASSERT_EQ(got[(b * n + i) * C + c], full[(b * T + past + i) * C + c])
                  << DTypeName(d) << " C " << C << " sequence " << b << " row " << past + i;
            }
          }
        }
        past += n;
        EXPECT_EQ(cache.length, past);
      }
      EXPECT_EQ(cache.k.shape(), (std::vector<int64_t>{B, T, C}));
      EXPECT_EQ(cache.k.dtype(), d);
    }
}

}  // namespace
}  // namespace ampd::engine::ops
