// The CPU's CNN kernels: oneDNN's convolutions (f32, bf16) against the f64
// direct loops for every pass and several geometries; pooling and batch norm
// on values worked out by hand (PyTorch's semantics).
#include <cmath>
#include <random>
#include <vector>

#include "engine/backend/kernels/batch_norm.h"
#include "engine/backend/kernels/conv.h"
#include "engine/backend/kernels/pooling.h"
#include "engine/cpu/vector_isa.h"
#include "gtest/gtest.h"

namespace ampd::engine {
namespace {

using backend::BatchNormBackwardKernel;
using backend::BatchNormKernel;
using backend::BatchNormResult;
using backend::Conv2dBackwardDataKernel;
using backend::Conv2dBackwardWeightKernel;
using backend::Conv2dGeometry;
using backend::Conv2dKernel;
using backend::Kernel;
using backend::Pool2dBackwardKernel;
using backend::Pool2dGeometry;
using backend::Pool2dKernel;

Tensor Random(const std::vector<int64_t>& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return Tensor::FromVector(v, shape, DType::kF32);
}

Tensor To(const Tensor& t, DType dtype) {
  return Tensor::FromDoubles(t.ToDoubles(), t.shape(), dtype);
}

// max |a - b| / max(1, max |b|).
double RelErr(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.ToDoubles(), y = b.ToDoubles();
  EXPECT_EQ(x.size(), y.size());
  double err = 0, scale = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return err / scale;
}

struct Case {
  std::vector<int64_t> x, w;
  Conv2dGeometry g;
  bool bias;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({{4, 3, 12, 12}, {8, 3, 3, 3}, {}, true});
  Case padded{{2, 16, 9, 7}, {32, 16, 3, 3}, {}, true};
  padded.g.padding[0] = padded.g.padding[1] = 1;
  cases.push_back(padded);
  Case strided{{3, 4, 11, 10}, {6, 4, 5, 3}, {}, false};
  strided.g.stride[0] = 2, strided.g.stride[1] = 3;
  strided.g.padding[0] = 2, strided.g.padding[1] = 0;
  strided.g.dilation[0] = 1, strided.g.dilation[1] = 2;
  cases.push_back(strided);
  Case grouped{{2, 8, 6, 6}, {12, 2, 3, 3}, {}, true};
  grouped.g.groups = 4;
  grouped.g.padding[0] = grouped.g.padding[1] = 1;
  cases.push_back(grouped);
  cases.push_back({{2, 32, 5, 5}, {16, 32, 1, 1}, {}, false});  // a 1x1 projection
  return cases;
}

// Every pass in `dtype` against the f64 loops on the same (rounded) values.
void CheckConvAgainstReference(DType dtype, double tol) {
  auto fwd = Kernel<Conv2dKernel>(Device::kCpu);
  auto bwd_data = Kernel<Conv2dBackwardDataKernel>(Device::kCpu);
  auto bwd_weight = Kernel<Conv2dBackwardWeightKernel>(Device::kCpu);
  int i = 0;
  for (const Case& c : Cases()) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " case " << i++);
    Tensor x = To(Random(c.x, 1), dtype), w = To(Random(c.w, 2), dtype);
    Tensor b = c.bias ? To(Random({c.w[0]}, 3), dtype) : Tensor();
    Tensor y = fwd(x, w, b, c.g, dtype);
    Tensor y64 = fwd(To(x, DType::kF64), To(w, DType::kF64), c.bias ? To(b, DType::kF64) : Tensor(),
                     c.g, DType::kF64);
    ASSERT_EQ(y.shape(), y64.shape());
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_LT(RelErr(y, y64), tol);
    Tensor dy = To(Random(y.shape(), 4), dtype);
    Tensor dx = bwd_data(dy, w, c.x, c.g, dtype);
    Tensor dx64 = bwd_data(To(dy, DType::kF64), To(w, DType::kF64), c.x, c.g, DType::kF64);
    EXPECT_EQ(dx.shape(), c.x);
    EXPECT_LT(RelErr(dx, dx64), tol);
    backend::Conv2dWeightGrads wg = bwd_weight(x, dy, c.w, c.bias, c.g, dtype);
    backend::Conv2dWeightGrads wg64 =
        bwd_weight(To(x, DType::kF64), To(dy, DType::kF64), c.w, c.bias, c.g, DType::kF64);
    EXPECT_EQ(wg.dw.shape(), c.w);
    EXPECT_LT(RelErr(wg.dw, wg64.dw), tol);
    ASSERT_EQ(wg.db.defined(), c.bias);
    if (c.bias) {
      EXPECT_LT(RelErr(wg.db, wg64.db), tol);
    }
  }
}

TEST(CnnKernelsTest, ConvF32MatchesTheDirectLoops) { CheckConvAgainstReference(DType::kF32, 1e-5); }

// bf16 in and out: accumulation is f32, so the error is the output's rounding.
TEST(CnnKernelsTest, ConvBf16MatchesTheDirectLoops) {
  CheckConvAgainstReference(DType::kBF16, 8e-3);
}

TEST(CnnKernelsTest, ConvF16IsWidenedAndRoundedOnce) {
  CheckConvAgainstReference(DType::kF16, 1e-3);
}

TEST(CnnKernelsTest, ConvOutputSizeIsPyTorchs) {
  EXPECT_EQ(backend::ConvOutputSize(28, 3, 1, 1, 1), 28);
  EXPECT_EQ(backend::ConvOutputSize(28, 5, 2, 0, 1), 12);  // floor(23 / 2) + 1
  EXPECT_EQ(backend::ConvOutputSize(7, 3, 1, 0, 3), 1);    // dilated span 7
  EXPECT_EQ(backend::ConvOutputSize(6, 3, 1, 0, 3), 0);    // does not fit
}

Tensor Plane(const std::vector<float>& v, int64_t h, int64_t w) {
  return Tensor::FromVector(v, {1, 1, h, w}, DType::kF32);
}

TEST(CnnKernelsTest, MaxPoolTakesTheFirstMaximumAndNaN) {
  // 2x2 windows over a 2x4 plane: a tie, and a NaN.
  const float nan = std::nanf("");
  Tensor x = Plane({1, 5, 2, nan,  //
                    5, 3, 0, 1},
                   2, 4);
  Pool2dGeometry g;
  g.op = OpId::kMaxPool2d;
  g.kernel[0] = g.kernel[1] = g.stride[0] = g.stride[1] = 2;
  Tensor y = Kernel<Pool2dKernel>(Device::kCpu)(x, g, DType::kF32);
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 1, 1, 2}));
  EXPECT_EQ(y.ToFloats()[0], 5.0f);
  EXPECT_TRUE(std::isnan(y.ToFloats()[1]));
  Tensor dx = Kernel<Pool2dBackwardKernel>(Device::kCpu)(x, Plane({10, 20}, 1, 2), g);
  // The tie goes to the first 5 (row 0, col 1); the NaN takes its window's gradient.
  EXPECT_EQ(dx.ToFloats(), (std::vector<float>{0, 10, 0, 20, 0, 0, 0, 0}));
}

TEST(CnnKernelsTest, TwoByTwoMaxPoolTakesTheFirstMaximumOfEveryWindow) {
  // Small integers (many ties), some NaNs, odd sizes (the last row and
  // column belong to no window): the 2x2 stride-2 path against a scan. The
  // wider plane has 18 windows a row, so the AVX-512 kernel (16 at a time)
  // and the loop after it both run; each shape also runs with the portable
  // loop alone.
  struct Shape {
    int64_t H, W, OH, OW;
  };
  for (const Shape& shape : {Shape{7, 9, 3, 4}, Shape{5, 37, 2, 18}}) {
    for (bool vector : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "W " << shape.W << (vector ? " vector" : " portable"));
      cpu::AllowAvx512Kernels(vector);
      const int64_t N = 2, C = 3, H = shape.H, W = shape.W, OH = shape.OH, OW = shape.OW;
      std::vector<float> v(N * C * H * W);
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = (i * 7919 % 13 == 0) ? std::nanf("") : static_cast<float>((i * 2654435761u) % 5);
      }
      Tensor x = Tensor::FromVector(v, {N, C, H, W}, DType::kF32);
      std::vector<float> d(N * C * OH * OW);
      for (size_t i = 0; i < d.size(); ++i) d[i] = 1.0f + i;
      Pool2dGeometry g;
      g.op = OpId::kMaxPool2d;
      g.kernel[0] = g.kernel[1] = g.stride[0] = g.stride[1] = 2;
      const std::vector<float> y = Kernel<Pool2dKernel>(Device::kCpu)(x, g, DType::kF32).ToFloats();
      ASSERT_EQ(y.size(), d.size());
      const std::vector<float> dx = Kernel<Pool2dBackwardKernel>(Device::kCpu)(
                                        x, Tensor::FromVector(d, {N, C, OH, OW}, DType::kF32), g)
                                        .ToFloats();
      std::vector<float> want_dx(v.size(), 0.0f);
      for (int64_t p = 0; p < N * C; ++p) {
        for (int64_t oh = 0; oh < OH; ++oh) {
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t best = p * H * W + 2 * oh * W + 2 * ow;
            for (int64_t i = 0; i < 2; ++i) {
              for (int64_t j = 0; j < 2; ++j) {
                const int64_t at = p * H * W + (2 * oh + i) * W + 2 * ow + j;
                if (v[at] > v[best] || (std::isnan(v[at]) && !std::isnan(v[best]))) best = at;
              }
            }
            const int64_t o = (p * OH + oh) * OW + ow;
            if (std::isnan(v[best])) {
              EXPECT_TRUE(std::isnan(y[o])) << o;
            } else {
              EXPECT_EQ(y[o], v[best]) << o;
            }
            want_dx[best] += d[o];
          }
        }
      }
      EXPECT_EQ(dx, want_dx);
    }
  }
  cpu::AllowAvx512Kernels(true);
}

// Raw bits, so that NaNs compare too.
std::vector<uint16_t> Bits16(const Tensor& t) {
  const auto* p = static_cast<const uint16_t*>(t.raw());
  return std::vector<uint16_t>(p, p + t.numel());
}

// bf16 activations (as under autocast) through the 2x2 max pool: the
// AVX-512 path reads and writes bf16 rows as they are (no f32 plane), and
// gives the portable path's bits: ties (small integers), NaNs (a window's
// NaN wins; a NaN gradient keeps its bits, quieted), an odd last row and
// column, and rows of more than 16 windows.
TEST(CnnKernelsTest, TwoByTwoMaxPoolOnBf16IsBitwiseThePortablePath) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{2, 3, 7, 9}, {2, 2, 5, 37}, {3, 4, 28, 28}}) {
    SCOPED_TRACE(::testing::Message() << "W " << shape[3]);
    std::vector<float> xv(shape[0] * shape[1] * shape[2] * shape[3]);
    for (size_t i = 0; i < xv.size(); ++i) {
      xv[i] = (i * 7919 % 29 == 0) ? std::nanf("") : static_cast<float>((i * 2654435761u) % 7) - 3;
    }
    const Tensor x = Tensor::FromVector(xv, shape, DType::kBF16);
    const std::vector<int64_t> ys = {shape[0], shape[1], shape[2] / 2, shape[3] / 2};
    std::vector<float> dv = Random(ys, 32).ToFloats();
    dv[1] = std::nanf("");
    const Tensor dy = Tensor::FromVector(dv, ys, DType::kBF16);
    Pool2dGeometry g;
    g.op = OpId::kMaxPool2d;
    g.kernel[0] = g.kernel[1] = g.stride[0] = g.stride[1] = 2;
    std::vector<uint16_t> y[2], dx[2];
    for (bool wide : {false, true}) {
      cpu::AllowAvx512Kernels(wide);
      const Tensor out = Kernel<Pool2dKernel>(Device::kCpu)(x, g, DType::kBF16);
      const Tensor grad = Kernel<Pool2dBackwardKernel>(Device::kCpu)(x, dy, g);
      EXPECT_EQ(out.dtype(), DType::kBF16);
      EXPECT_EQ(grad.dtype(), DType::kBF16);
      y[wide] = Bits16(out);
      dx[wide] = Bits16(grad);
    }
    cpu::AllowAvx512Kernels(true);
    EXPECT_EQ(y[1], y[0]);
    EXPECT_EQ(dx[1], dx[0]);
  }
}

TEST(CnnKernelsTest, AvgPoolCountsPaddingUnlessToldNot) {
  Tensor x = Plane({1, 2, 3, 4}, 2, 2);
  Pool2dGeometry g;
  g.op = OpId::kAvgPool2d;
  g.kernel[0] = g.kernel[1] = 2;
  g.stride[0] = g.stride[1] = 1;
  g.padding[0] = g.padding[1] = 1;
  // 3x3 outputs; the corner window holds one value and three pads.
  Tensor y = Kernel<Pool2dKernel>(Device::kCpu)(x, g, DType::kF32);
  EXPECT_FLOAT_EQ(y.ToFloats()[0], 1.0f / 4);
  EXPECT_FLOAT_EQ(y.ToFloats()[4], 10.0f / 4);
  g.count_include_pad = false;
  y = Kernel<Pool2dKernel>(Device::kCpu)(x, g, DType::kF32);
  EXPECT_FLOAT_EQ(y.ToFloats()[0], 1.0f);
  EXPECT_FLOAT_EQ(y.ToFloats()[1], 1.5f);
}

TEST(CnnKernelsTest, AdaptiveAvgPoolWindowsArePyTorchs) {
  // 5 -> 3: windows [0,2), [1,4), [3,5).
  Tensor x = Plane({1, 2, 3, 4, 5}, 1, 5);
  Pool2dGeometry g;
  g.op = OpId::kAdaptiveAvgPool2d;
  g.output[0] = 1, g.output[1] = 3;
  Tensor y = Kernel<Pool2dKernel>(Device::kCpu)(x, g, DType::kF32);
  EXPECT_EQ(y.ToFloats(), (std::vector<float>{1.5f, 3.0f, 4.5f}));
}

TEST(CnnKernelsTest, BatchNormUpdatesRunningStatisticsAsPyTorch) {
  // One channel, values 1..4 over N=2, H*W=2: mean 2.5, biased var 1.25,
  // unbiased 5/3.
  Tensor x = Tensor::FromVector({1, 2, 3, 4}, {2, 1, 1, 2}, DType::kF32);
  Tensor gamma = Tensor::FromVector({2}, {1}, DType::kF32);
  Tensor beta = Tensor::FromVector({0.5f}, {1}, DType::kF32);
  Tensor rm = Tensor::FromVector({1.0f}, {1}, DType::kF32);
  Tensor rv = Tensor::FromVector({1.0f}, {1}, DType::kF32);
  BatchNormResult r =
      Kernel<BatchNormKernel>(Device::kCpu)(x, gamma, beta, rm, rv, true, 0.1, 1e-5, DType::kF32);
  const double rstd = 1 / std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(r.y.ToFloats()[0], (1 - 2.5) * rstd * 2 + 0.5, 1e-6);
  EXPECT_NEAR(rm.ToFloats()[0], 0.9 * 1 + 0.1 * 2.5, 1e-7);
  EXPECT_NEAR(rv.ToFloats()[0], 0.9 * 1 + 0.1 * 5.0 / 3.0, 1e-7);
  // Eval normalises with the running statistics and leaves them alone.
  const float rm_now = rm.ToFloats()[0], rv_now = rv.ToFloats()[0];
  r = Kernel<BatchNormKernel>(Device::kCpu)(x, gamma, beta, rm, rv, false, 0.1, 1e-5, DType::kF32);
  EXPECT_NEAR(r.y.ToFloats()[3], (4 - rm_now) / std::sqrt(rv_now + 1e-5) * 2 + 0.5, 1e-5);
  EXPECT_EQ(rm.ToFloats()[0], rm_now);
  EXPECT_EQ(rv.ToFloats()[0], rv_now);
}

TEST(CnnKernelsTest, BatchNormBf16InputKeepsF32Statistics) {
  Tensor x = To(Random({8, 4, 5, 5}, 7), DType::kBF16);
  Tensor gamma = Random({4}, 8), beta = Random({4}, 9);
  Tensor rm = Tensor::Zeros({4}, DType::kF32), rv = Tensor::Full({4}, DType::kF32, 1.0);
  BatchNormResult r =
      Kernel<BatchNormKernel>(Device::kCpu)(x, gamma, beta, rm, rv, true, 0.1, 1e-5, DType::kF32);
  Tensor rm64 = Tensor::Zeros({4}, DType::kF64), rv64 = Tensor::Full({4}, DType::kF64, 1.0);
  BatchNormResult r64 = Kernel<BatchNormKernel>(Device::kCpu)(
      To(x, DType::kF64), To(gamma, DType::kF64), To(beta, DType::kF64), rm64, rv64, true, 0.1,
      1e-5, DType::kF64);
  EXPECT_EQ(r.y.dtype(), DType::kF32);
  EXPECT_EQ(rm.dtype(), DType::kF32);
  EXPECT_LT(RelErr(r.y, r64.y), 1e-5);
  EXPECT_LT(RelErr(rm, rm64), 1e-6);
  EXPECT_LT(RelErr(rv, rv64), 1e-6);
  Tensor dy = Random(x.shape(), 10);
  auto g = Kernel<BatchNormBackwardKernel>(Device::kCpu)(x, gamma, r.mean, r.rstd, dy, true);
  auto g64 = Kernel<BatchNormBackwardKernel>(Device::kCpu)(
      To(x, DType::kF64), To(gamma, DType::kF64), r64.mean, r64.rstd, To(dy, DType::kF64), true);
  EXPECT_EQ(g.dx.dtype(), DType::kBF16);
  EXPECT_LT(RelErr(g.dx, g64.dx), 8e-3);
  EXPECT_LT(RelErr(g.dgamma, g64.dgamma), 1e-5);
  EXPECT_LT(RelErr(g.dbeta, g64.dbeta), 1e-5);
}

// Batch norm's AVX-512 rows (where the CPU has them) give the portable
// loops' bits: the same sums in the same order, the same roundings. Planes
// of 1 (an [N, C] input), 5, 49 and 784 values cover whole vectors and
// every kind of tail.
TEST(CnnKernelsTest, BatchNormAvx512RowsAreBitwiseThePortableLoops) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{64, 3}, {6, 3, 1, 5}, {4, 5, 7, 7}, {3, 2, 28, 28}})
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (bool training : {true, false}) {
        SCOPED_TRACE(::testing::Message() << shape[0] << "x" << shape[1] << " inner "
                                          << shape.size() << (training ? " training" : " eval")
                                          << (dtype == DType::kBF16 ? " bf16" : " f32"));
        const int64_t c = shape[1];
        // bf16 activations with f32 parameters, as under autocast: widened a
        // row at a time on the AVX-512 path, the output rounded once.
        const Tensor x = To(Random(shape, 21), dtype), dy = To(Random(shape, 22), dtype);
        const Tensor gamma = Random({c}, 23), beta = Random({c}, 24);
        struct Out {
          std::vector<float> y, mean, rstd, rm, rv, dx, dgamma, dbeta;
        };
        auto run = [&](bool wide) {
          cpu::AllowAvx512Kernels(wide);
          Tensor rm = Random({c}, 25), rv = Tensor::Full({c}, DType::kF32, 1.5);
          BatchNormResult r = Kernel<BatchNormKernel>(Device::kCpu)(x, gamma, beta, rm, rv,
                                                                    training, 0.1, 1e-5, dtype);
          auto g =
              Kernel<BatchNormBackwardKernel>(Device::kCpu)(x, gamma, r.mean, r.rstd, dy, training);
          cpu::AllowAvx512Kernels(true);
          return Out{r.y.ToFloats(), r.mean.ToFloats(), r.rstd.ToFloats(),   rm.ToFloats(),
                     rv.ToFloats(),  g.dx.ToFloats(),   g.dgamma.ToFloats(), g.dbeta.ToFloats()};
        };
        const Out portable = run(false), wide = run(true);
        EXPECT_EQ(wide.y, portable.y);
        EXPECT_EQ(wide.mean, portable.mean);
        EXPECT_EQ(wide.rstd, portable.rstd);
        EXPECT_EQ(wide.rm, portable.rm);
        EXPECT_EQ(wide.rv, portable.rv);
        EXPECT_EQ(wide.dx, portable.dx);
        EXPECT_EQ(wide.dgamma, portable.dgamma);
        EXPECT_EQ(wide.dbeta, portable.dbeta);
      }
}

}  // namespace
}  // namespace ampd::engine
