// The CPU backend's fused causal attention alone, forward and backward, at
// the GPT example's shape by default (batch 32, block 128, 4 heads of 64):
// ms per call, median of interleaved rounds, and the GFLOP/s of the causal
// work (forward: the scores and P V; backward: those two recomputed or
// re-derived, and dQ, dK, dV: 2 T (T + 1) / 2 D a product).
// With --dropout=p, the probabilities are dropped (nanoGPT's attn_dropout).
//   bazel run -c opt //bench:attention_bench [-- --batch=32 --seq=128 --heads=4 --head_size=64]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/random_matrix.h"
#include "engine/backend/kernel_registry.h"
#include "engine/backend/kernels/attention.h"
#include "engine/core/tensor.h"

ABSL_FLAG(int64_t, batch, 32, "Sequences per call");
ABSL_FLAG(int64_t, seq, 128, "Sequence length (T)");
ABSL_FLAG(int64_t, heads, 4, "Heads");
ABSL_FLAG(int64_t, head_size, 64, "Channels per head (D)");
ABSL_FLAG(int64_t, calls, 20, "Calls per timed round");
ABSL_FLAG(int64_t, rounds, 7, "Rounds (the median is reported)");
ABSL_FLAG(bool, bf16, false, "bf16 activations (as under bf16-mixed) instead of f32");
ABSL_FLAG(double, dropout, 0.0, "Dropout on the attention probabilities, in [0, 1)");

namespace {

using ampd::bench::RandomMatrix;

using ampd::engine::core::Device;
using ampd::engine::core::DType;
using ampd::engine::core::Tensor;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace backend = ampd::engine::backend;
  const int64_t B = absl::GetFlag(FLAGS_batch), T = absl::GetFlag(FLAGS_seq);
  const int64_t H = absl::GetFlag(FLAGS_heads), D = absl::GetFlag(FLAGS_head_size), C = H * D;
  const int64_t calls = std::max<int64_t>(1, absl::GetFlag(FLAGS_calls));
  const int64_t rounds = std::max<int64_t>(1, absl::GetFlag(FLAGS_rounds));
  const DType dtype = absl::GetFlag(FLAGS_bf16) ? DType::kBF16 : DType::kF32;
  auto forward = backend::Kernel<backend::CausalAttentionKernel>(Device::kCpu);
  auto backward = backend::Kernel<backend::CausalAttentionBackwardKernel>(Device::kCpu);
  const Tensor qkv = RandomMatrix(B * T, 3 * C, dtype, 1);
  const Tensor dy = RandomMatrix(B * T, C, dtype, 2);
  const backend::AttentionDropout drop{absl::GetFlag(FLAGS_dropout), 3};
  const backend::AttentionResult fwd = forward(qkv, T, H, drop);
  std::vector<double> fwd_ms, bwd_ms;
  for (int64_t r = 0; r <= rounds; ++r) {  // round 0 warms up
    Clock::time_point t = Clock::now();
    for (int64_t c = 0; c < calls; ++c) forward(qkv, T, H, drop);
    const double f = std::chrono::duration<double, std::milli>(Clock::now() - t).count() / calls;
    t = Clock::now();
    for (int64_t c = 0; c < calls; ++c) backward(qkv, fwd.y, fwd.lse, dy, T, H, drop);
    const double b = std::chrono::duration<double, std::milli>(Clock::now() - t).count() / calls;
    if (r > 0) {
      fwd_ms.push_back(f);
      bwd_ms.push_back(b);
    }
  }
  // Causal: each product covers T (T + 1) / 2 of the T^2 (query, key) pairs.
  const double pairs = static_cast<double>(B * H) * T * (T + 1) / 2;
  const double product_flop = 2.0 * pairs * D;
  std::printf(
      "causal attention, batch %lld, T %lld, %lld heads of %lld, %s, dropout %g: median of %lld "
      "rounds\n",
      static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
      static_cast<long long>(D), dtype == DType::kBF16 ? "bf16" : "f32", drop.p,
      static_cast<long long>(rounds));
  std::printf("forward   %8.3f ms  %7.1f GFLOP/s\n", Median(fwd_ms),
              2 * product_flop / Median(fwd_ms) * 1e-6);
  std::printf("backward  %8.3f ms  %7.1f GFLOP/s\n", Median(bwd_ms),
              5 * product_flop / Median(bwd_ms) * 1e-6);
  return 0;
}
