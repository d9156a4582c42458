// The CPU Linear kernel (bias in oneDNN's matmul epilogue) against an f64
// reference of x w^T + b, in f32 and bf16 (f32 and bf16 outputs, f32 and
// bf16 biases), including shapes that are not multiples of any block.

#include <cmath>
#include <random>
#include <vector>

#include "engine/backend/kernels/matmul.h"
#include "gtest/gtest.h"
#include "tests/engine/random_values.h"

namespace ampd::engine::cpu {
namespace {

using testing::RandomValues;

TEST(LinearKernelTest, AddsTheBiasToEveryRowOnce) {
  const int64_t m = 37, k = 70, n = 53;
  for (DType in : {DType::kF32, DType::kBF16}) {
    for (DType bias : {DType::kF32, DType::kBF16}) {
      for (DType out : {DType::kF32, DType::kBF16}) {
        if (in == DType::kF32 && out != DType::kF32) continue;
        // Values exactly representable in `in`, so the reference is exact.
        const Tensor x = Tensor::FromDoubles(RandomValues(m * k, 1), {m, k}, in);
        const Tensor w = Tensor::FromDoubles(RandomValues(n * k, 2), {n, k}, in);
        const Tensor b = Tensor::FromDoubles(RandomValues(n, 3), {n}, bias);
        const std::vector<double> xv = x.ToDoubles(), wv = w.ToDoubles(), bv = b.ToDoubles();
        const std::vector<double> got =
            backend::Kernel<backend::LinearKernel>(Device::kCpu)(x, w, b, out).ToDoubles();
        ASSERT_EQ(got.size(), static_cast<size_t>(m * n));
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double want = bv[j];
            for (int64_t p = 0; p < k; ++p) want += xv[i * k + p] * wv[j * k + p];
            const double tol = (out == DType::kBF16 ? 8e-3 : 1e-5) * std::max(1.0, std::fabs(want));
            ASSERT_NEAR(got[i * n + j], want, tol)
                << DTypeName(in) << " bias " << DTypeName(bias) << " out " << DTypeName(out)
                << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ampd::engine::cpu
