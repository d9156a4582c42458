// The CPU backend's non-GEMM kernels of one GPT block, each alone, at the
// GPT example's shapes by default (batch 32 x block 128 = 4096 rows, 256
// channels, MLP 4x): ms per call, median of rounds, and the GB/s each moves
// through memory (its inputs read once, outputs written once). Shows which
// of the step's small kernels run far from the memory bound.
//   bazel run -c opt //bench:gpt_kernels_bench [-- --rows=4096 --embd=256 --rounds=9]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/random_matrix.h"
#include "engine/backend/kernel_registry.h"
#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/layer_norm.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/core/tensor.h"

ABSL_FLAG(int64_t, rows, 4096, "Rows (batch x block)");
ABSL_FLAG(int64_t, embd, 256, "Channels (C); the MLP is 4 C wide");
ABSL_FLAG(int64_t, calls, 20, "Calls per timed round");
ABSL_FLAG(int64_t, rounds, 7, "Rounds (the median is reported)");
ABSL_FLAG(std::string, only, "", "Run only the kernels whose name contains this");

namespace {

using ampd::bench::RandomMatrix;

using ampd::engine::core::Device;
using ampd::engine::core::DType;
using ampd::engine::core::Tensor;
using ampd::engine::ops::OpId;
using Clock = std::chrono::steady_clock;

struct Case {
  std::string name;
  double bytes;  // moved per call
  std::function<void()> call;
  std::vector<double> ms = {};
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace backend = ampd::engine::backend;
  const int64_t R = absl::GetFlag(FLAGS_rows), C = absl::GetFlag(FLAGS_embd);
  const int64_t calls = std::max<int64_t>(1, absl::GetFlag(FLAGS_calls));
  const int64_t rounds = std::max<int64_t>(1, absl::GetFlag(FLAGS_rounds));
  auto sum_rows = backend::Kernel<backend::SumRowsKernel>(Device::kCpu);
  auto ln = backend::Kernel<backend::LayerNormKernel>(Device::kCpu);
  auto ln_back = backend::Kernel<backend::LayerNormBackwardKernel>(Device::kCpu);
  auto unary = backend::Kernel<backend::UnaryKernel>(Device::kCpu);
  auto unary_back = backend::Kernel<backend::UnaryBackwardKernel>(Device::kCpu);
  auto binary = backend::Kernel<backend::BinaryKernel>(Device::kCpu);
  auto cast = backend::Kernel<backend::CastKernel>(Device::kCpu);

  const Tensor x = RandomMatrix(R, C, DType::kF32, 1),
               dx_bf16 = RandomMatrix(R, C, DType::kBF16, 2);
  const Tensor gamma = RandomMatrix(1, C, DType::kF32, 3).Reshape({C});
  const Tensor beta = RandomMatrix(1, C, DType::kF32, 4).Reshape({C});
  const Tensor h = RandomMatrix(R, 4 * C, DType::kBF16, 5),
               dh = RandomMatrix(R, 4 * C, DType::kBF16, 6);
  const Tensor qkv_grad = RandomMatrix(R, 3 * C, DType::kBF16, 7);
  const backend::LayerNormResult ln_fwd = ln(x, gamma, beta, 1e-5, DType::kF32);
  const Tensor dy = RandomMatrix(R, C, DType::kF32, 8);
  const double n = static_cast<double>(R * C);
  std::vector<Case> cases = {
      {"sum_rows bf16 [R, 3C] (c_attn bias grad)", 2 * 3 * n,
       [&] { sum_rows(qkv_grad, DType::kF32); }},
      {"sum_rows bf16 [R, 4C] (c_fc bias grad)", 2 * 4 * n, [&] { sum_rows(h, DType::kF32); }},
      {"sum_rows bf16 [R, C] (c_proj bias grad)", 2 * n, [&] { sum_rows(dx_bf16, DType::kF32); }},
      {"layer_norm f32 [R, C]", 8 * n, [&] { ln(x, gamma, beta, 1e-5, DType::kF32); }},
      {"layer_norm_backward f32 [R, C]", 12 * n, [&] { ln_back(x, gamma, ln_fwd, dy); }},
      // A norm feeding a bf16 linear (ops/layer_norm.h): bf16 y, bf16 dy.
      {"layer_norm f32 -> bf16 [R, C]", 6 * n, [&] { ln(x, gamma, beta, 1e-5, DType::kBF16); }},
      {"layer_norm_backward bf16 dy [R, C]", 10 * n, [&] { ln_back(x, gamma, ln_fwd, dx_bf16); }},
      {"gelu_tanh bf16 [R, 4C]", 4 * 4 * n, [&] { unary(OpId::kGeluTanh, h); }},
      {"gelu_tanh_backward bf16 [R, 4C]", 6 * 4 * n, [&] { unary_back(OpId::kGeluTanh, h, dh); }},
      {"add f32 + bf16 -> f32 [R, C]", 10 * n,
       [&] { binary(OpId::kAdd, x, dx_bf16, DType::kF32); }},
      {"cast f32 -> bf16 [R, C]", 6 * n, [&] { cast(x, DType::kBF16); }},
      {"cast bf16 -> f32 [R, C]", 6 * n, [&] { cast(dx_bf16, DType::kF32); }},
  };
  const std::string only = absl::GetFlag(FLAGS_only);
  cases.erase(std::remove_if(cases.begin(), cases.end(),
                             [&](const Case& c) { return c.name.find(only) == std::string::npos; }),
              cases.end());
  for (int64_t r = 0; r <= rounds; ++r) {  // round 0 warms up
    for (Case& c : cases) {
      const Clock::time_point t = Clock::now();
      for (int64_t k = 0; k < calls; ++k) c.call();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count() / calls;
      if (r > 0) c.ms.push_back(ms);
    }
  }
  std::printf("GPT block kernels, %lld rows x %lld channels: median of %lld rounds x %lld calls\n",
              static_cast<long long>(R), static_cast<long long>(C), static_cast<long long>(rounds),
              static_cast<long long>(calls));
  for (Case& c : cases) {
    std::sort(c.ms.begin(), c.ms.end());
    const double ms = c.ms[c.ms.size() / 2];
    std::printf("%-44s %8.3f ms %7.1f GB/s\n", c.name.c_str(), ms, c.bytes / ms * 1e-6);
  }
  return 0;
}
