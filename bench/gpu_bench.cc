// The GPU benchmark (not a test; run by tools/gpu_bundle's `run` on a GPU
// machine, numbers in bench/README.md).
//
// 1. gemm: a large bf16 GEMM (8192^3 by default) through cuBLASLt directly
//    (GemmRunner: the measured cuBLAS bf16 rate) and through the engine's
//    Backend::Matmul (allocation and dispatch included), same shape, side by
//    side: TFLOP/s and the engine/cuBLAS ratio.
//    On a GPU with FP8 tensor cores, the same shape in E4M3 (TN, bf16 out):
//    cuBLASLt directly against the engine's Fp8Matmul (target >= 90 %), and
//    the FP8 / bf16 cuBLASLt rates.
// 2. mlp_step: the real training step (Trainer::RunStep on the CUDA backend:
//    host batch upload, autocast forward, loss, scaled backward, unscale with
//    the device flag, fused AdamW, on-device scale update, one host read) of
//    an MLP [input 1024] -> hidden x2 -> [1000], batch 1024, for hidden 4096
//    and 8192 in 32-true (TF32 off), bf16-mixed and 16-mixed. Prints
//    samples/s, achieved TFLOP/s (6 * batch * weights per step), the fraction
//    of the measured cuBLAS bf16 rate and of --peak_tflops, and the
//    bf16-mixed / 32-true ratio. Modes are interleaved round by round; the
//    median round is reported.
// 3. gpt_step: GPT-2 124M (12 layers, 12 heads, 768 wide, block 1024, vocab
//    50257, tied head) trained by the same Trainer on random token windows,
//    bf16-mixed, with the engine's default flash attention kernels (WMMA's):
//    tokens/s and MFU (model FLOPs 6N + 12LTC per token over --peak_tflops),
//    against PyTorch eager AMP on the same model (bench/torch_gpt_bench.py
//    --device=cuda) in the bundle's summary. With FP8 tensor cores the same
//    step in fp8-hybrid (E4M3 forward, E5M2 gradients, delayed scaling) and
//    bf16-mixed / fp8-hybrid (target >= 1.3x).
// 4. attention: the fused causal attention at the GPT step's shape (bf16),
//    WMMA's kernels against mma.sync's (never yet run on a GPU): their
//    outputs compared on random data, then forward and backward timed,
//    interleaved. Then, if they agreed and the device is healthy, the GPT
//    step again with mma.sync's kernels, and its speed over WMMA's step.
//    This comes after everything else, so that kernels which fault cost no
//    other measurement.
//
// Lines starting with "RESULT " are machine-readable (tools/gpu_bundle's
// summary compares them with PyTorch's numbers from bench/torch_amp_bench.py).
//
//   gpu_bench [--hidden=4096,8192] [--batch=1024] [--steps=10] [--rounds=5]  (absl flags)
//             [--gemm=8192] [--peak_tflops=989]
//             [--gpt_layers=12] [--gpt_embd=768] [--gpt_heads=12] [--gpt_block=1024]
//             [--gpt_vocab=50257] [--gpt_batch=8]   (--gpt_layers=0: no GPT)
//             [--gpt_attention=both]  (wmma: no attention comparison, no mma.sync step)
//             [--profile]  (then the MLP's and the GPT step's time per kernel)

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "bench/kernel_profile.h"
#include "bench/random_matrix.h"
#include "engine/amp/precision.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/attention.h"
#include "engine/backend/kernels/fp8.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/data/dataset.h"
#include "engine/data/token_sequence.h"
#include "engine/nn/gpt.h"
#include "engine/train/trainer.h"

ABSL_FLAG(std::vector<std::string>, hidden, std::vector<std::string>({"4096", "8192"}),
          "MLP hidden widths to measure, comma-separated");
ABSL_FLAG(int64_t, batch, 1024, "Batch size");
ABSL_FLAG(int64_t, steps, 10, "Timed steps per mode per round");
ABSL_FLAG(int64_t, rounds, 5, "Interleaved rounds (the median is reported)");
ABSL_FLAG(int64_t, gemm, 8192, "Size of the square bf16 GEMM");
ABSL_FLAG(double, peak_tflops, 989, "Nominal dense bf16 peak, for the %peak column");
ABSL_FLAG(bool, profile, false,
          "After the largest MLP's bf16-mixed and 32-true steps and the GPT step: two more "
          "steps each with the device synchronised around every kernel, and the time per "
          "kernel (exclusive of kernels it calls)");
ABSL_FLAG(int64_t, gpt_layers, 12, "GPT layers (0: skip the GPT step)");
ABSL_FLAG(int64_t, gpt_embd, 768, "GPT width");
ABSL_FLAG(int64_t, gpt_heads, 12, "GPT heads");
ABSL_FLAG(int64_t, gpt_block, 1024, "GPT context");
ABSL_FLAG(int64_t, gpt_vocab, 50257, "GPT vocabulary");
ABSL_FLAG(int64_t, gpt_batch, 8, "GPT sequences per step");
ABSL_FLAG(std::string, gpt_attention, "both",
          "The flash attention kernels the GPT step runs with: both (WMMA's, the engine's "
          "default, then, after the attention comparison, mma.sync's) or wmma (WMMA's only, no "
          "comparison)");

namespace ampd::bench {
namespace {

using engine::DType;
using engine::Tensor;
using Clock = std::chrono::steady_clock;
using ampd::bench::InstallKernelProfile;

constexpr int64_t kInput = 1024;
constexpr int64_t kClasses = 1000;

struct Options {
  std::vector<int64_t> hidden = {4096, 8192};
  int64_t batch = 1024;
  int64_t steps = 10;
  int64_t rounds = 5;
  int64_t gemm = 8192;
  double peak_tflops = 989;  // H100/H200 SXM dense bf16, NVIDIA's datasheet
  engine::nn::GptSpec gpt;   // n_layer 0: skipped
  int64_t gpt_batch = 8;
  bool gpt_mma = true;  // --gpt_attention=both: compare the kernel sets, step with mma.sync's
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of `direct` and of `engine`: 3 warm-up calls each, then
// 7 interleaved rounds of 10 calls each, synchronised; the median rounds.
std::pair<double, double> TimeInterleaved(const std::function<void()>& direct,
                                          const std::function<void()>& engine_call) {
  auto time = [](const std::function<void()>& f, int reps) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    engine::cuda::SynchronizeThisThread();
    return Seconds(t0, Clock::now()) / reps;
  };
  time(direct, 3);
  time(engine_call, 3);
  std::vector<double> d, e;
  for (int r = 0; r < 7; ++r) {
    d.push_back(time(direct, 10));
    e.push_back(time(engine_call, 10));
  }
  return {Median(d), Median(e)};
}

// Returns the cuBLAS rate (TFLOP/s), for the fractions in the MLP table.
double BenchGemm(engine::backend::Backend& gpu, int64_t size) {
  const int64_t m = size, n = size, k = size;
  Tensor a = engine::Tensor::Full({m, k}, DType::kBF16, 0.01, engine::Device::kCuda);
  Tensor b = engine::Tensor::Full({k, n}, DType::kBF16, 0.02, engine::Device::kCuda);
  Tensor c = gpu.Allocate({m, n}, DType::kBF16, false);
  engine::cuda::GemmArgs args;
  args.m = m;
  args.n = n;
  args.k = k;
  args.trans_b = true;  // x @ W^T, as a Linear
  args.a = a.raw();
  args.b = b.raw();
  args.c = c.raw();
  args.ab_dtype = args.c_dtype = static_cast<int>(DType::kBF16);
  void* stream = engine::cuda::CudaStreamForThisThread();
  const double flops = 2.0 * m * n * k;
  const auto [direct, engine_s] =
      TimeInterleaved([&] { engine::cuda::GemmRunner::ForThisThread().Run(args, stream); },
                      [&] {
                        engine::backend::Kernel<engine::backend::MatmulKernel>(
                            engine::Device::kCuda)(a, b, false, true, DType::kBF16);
                      });
  const double cublas = flops / direct / 1e12, ours = flops / engine_s / 1e12;
  std::printf(
      "gemm bf16 %lldx%lldx%lld (x @ W^T): cuBLASLt %.1f TFLOP/s, engine Matmul %.1f "
      "TFLOP/s, engine/cuBLAS %.3f\n",
      (long long)m, (long long)n, (long long)k, cublas, ours, ours / cublas);
  std::printf("RESULT gemm size=%lld cublas_tflops=%.2f engine_tflops=%.2f\n", (long long)size,
              cublas, ours);
  return cublas;
}

// E4M3 x E4M3 codes (all 1.0: the rate does not depend on the values), TN,
// into bf16: cuBLASLt directly (its heuristic's best algorithm) against the
// engine's Fp8Matmul kernel (allocation and dispatch included), interleaved;
// and the FP8 rate over the bf16 one measured just before.
void BenchFp8Gemm(engine::backend::Backend& gpu, int64_t size, double bf16_cublas) {
  const int64_t m = size, n = size, k = size;
  Tensor a = gpu.Allocate({m, k}, DType::kU8, false), b = gpu.Allocate({n, k}, DType::kU8, false);
  gpu.Fill(a, 0x38);  // E4M3 1.0
  gpu.Fill(b, 0x38);
  Tensor invs = engine::Tensor::Full({2}, DType::kF32, 1.0, engine::Device::kCuda);
  Tensor c = gpu.Allocate({m, n}, DType::kBF16, false);
  engine::cuda::GemmArgs args;
  args.m = m;
  args.n = n;
  args.k = k;
  args.trans_b = true;
  args.a = a.raw();
  args.b = b.raw();
  args.c = c.raw();
  args.ab_dtype = args.b_dtype = engine::cuda::kGemmE4M3;
  args.c_dtype = static_cast<int>(DType::kBF16);
  args.a_scale = invs.data<float>();
  args.b_scale = invs.data<float>() + 1;
  if (!engine::cuda::GemmRunner::ForThisThread().HasAlgorithm(args)) {
    std::printf("SKIPPED fp8 gemm: cuBLASLt has no FP8 algorithm for it here\n");
    return;
  }
  void* stream = engine::cuda::CudaStreamForThisThread();
  const double flops = 2.0 * m * n * k;
  const auto [direct, engine_s] = TimeInterleaved(
      [&] { engine::cuda::GemmRunner::ForThisThread().Run(args, stream); },
      [&] {
        engine::backend::Kernel<engine::backend::Fp8MatmulKernel>(engine::Device::kCuda)(
            a, engine::core::Fp8Format::kE4M3, b, engine::core::Fp8Format::kE4M3, invs, 0, 1,
            Tensor(), DType::kBF16);
      });
  const double cublas = flops / direct / 1e12, ours = flops / engine_s / 1e12;
  std::printf(
      "gemm fp8 e4m3 %lldx%lldx%lld (x @ W^T, bf16 out): cuBLASLt %.1f TFLOP/s, engine "
      "Fp8Matmul %.1f TFLOP/s, engine/cuBLAS %.3f (target >= 0.9), fp8/bf16 (cuBLASLt) %.2fx\n",
      (long long)m, (long long)n, (long long)k, cublas, ours, ours / cublas,
      bf16_cublas > 0 ? cublas / bf16_cublas : 0.0);
  std::printf("RESULT fp8_gemm size=%lld cublas_tflops=%.2f engine_tflops=%.2f\n", (long long)size,
              cublas, ours);
}

engine::train::TrainerConfig Config(const std::string& precision, int64_t hidden, int64_t batch) {
  engine::train::TrainerConfig c;
  engine::nn::MlpSpec mlp;
  mlp.input_dim = kInput;
  mlp.hidden = {hidden, hidden};
  mlp.num_classes = kClasses;
  c.model = mlp;
  c.precision = *engine::amp::ResolvePrecision(precision);
  c.optimizer.kind = engine::optim::OptimizerSpec::Kind::kAdamW;
  c.optimizer.lr = 1e-4;
  c.training.steps = 1 << 30;
  c.training.batch_size = batch;
  c.training.seed = 1;
  c.device = engine::Device::kCuda;
  return c;
}

// --profile: two more steps of `t`, the device synchronised around every
// kernel (bench/kernel_profile.h), and the table.
void ProfileSteps(const char* what, engine::train::Trainer& t) {
  InstallKernelProfile(engine::Device::kCuda, [] { engine::cuda::SynchronizeThisThread(); });
  ampd::bench::ProfileSteps(what, 2, [&] { t.RunStep(); });
}

// The fused causal attention at the GPT step's shape in bf16, WMMA's kernels
// against mma.sync's. First their outputs on random data (y, the logsumexp,
// dx), compared: both are bf16 results of f32 sums in different orders, so
// they differ by rounding only, within `kTolerance` of the largest
// magnitude; a wrong fragment or mask differs by far more. Then forward and
// backward timed, interleaved: ms per call and TFLOP/s by flash attention's
// count (the causal half of 4 B H T^2 D forward, 2.5 times that backward).
// Returns whether they agreed.
bool BenchAttention(const Options& o) {
  const engine::nn::GptSpec& g = o.gpt;
  const int64_t B = o.gpt_batch, T = g.block_size, C = g.n_embd, H = g.n_head;
  using engine::cuda::FlashKernels;
  const Tensor qkv = RandomMatrix(B * T, 3 * C, DType::kBF16, 11).To(engine::Device::kCuda);
  const Tensor dy = RandomMatrix(B * T, C, DType::kBF16, 12).To(engine::Device::kCuda);
  const auto forward =
      engine::backend::Kernel<engine::backend::CausalAttentionKernel>(engine::Device::kCuda);
  const auto backward = engine::backend::Kernel<engine::backend::CausalAttentionBackwardKernel>(
      engine::Device::kCuda);
  const FlashKernels initial = engine::cuda::GetFlashKernels();
  struct Outputs {
    std::vector<double> y, lse, dx;
  };
  auto run = [&](FlashKernels k) {
    engine::cuda::SetFlashKernels(k);
    const engine::backend::AttentionResult r = forward(qkv, T, H, {});
    const Tensor dx = backward(qkv, r.y, r.lse, dy, T, H, {});
    return Outputs{r.y.To(engine::Device::kCpu).ToDoubles(),
                   r.lse.To(engine::Device::kCpu).ToDoubles(),
                   dx.To(engine::Device::kCpu).ToDoubles()};
  };
  const Outputs wmma = run(FlashKernels::kWmma), mma = run(FlashKernels::kMma);
  constexpr double kTolerance = 2e-2;
  bool agree = true;
  auto compare = [&](const char* name, const std::vector<double>& w, const std::vector<double>& m) {
    double scale = 0, diff = w.size() == m.size() ? 0 : INFINITY;
    for (size_t i = 0; i < w.size() && i < m.size(); ++i) {
      scale = std::max(scale, std::fabs(w[i]));
      diff = std::max(diff, std::isfinite(m[i]) ? std::fabs(w[i] - m[i]) : INFINITY);
    }
    const double rel = diff / std::max(scale, 1e-30);
    agree &= rel <= kTolerance;
    std::printf(" %s_max_diff=%.3g", name, rel);
  };
  std::printf(
      "\nattention mma.sync against WMMA on random bf16 data (|difference| / max |value|):\n"
      "RESULT attention_check");
  compare("y", wmma.y, mma.y);
  compare("lse", wmma.lse, mma.lse);
  compare("dx", wmma.dx, mma.dx);
  std::printf(" agree=%d\n", agree ? 1 : 0);
  std::fflush(stdout);

  const engine::backend::AttentionResult out = forward(qkv, T, H, {});
  auto with = [](FlashKernels k, const std::function<void()>& f) {
    return [k, f] {
      engine::cuda::SetFlashKernels(k);
      f();
    };
  };
  const auto [wmma_fwd, mma_fwd] =
      TimeInterleaved(with(FlashKernels::kWmma, [&] { forward(qkv, T, H, {}); }),
                      with(FlashKernels::kMma, [&] { forward(qkv, T, H, {}); }));
  const auto [wmma_bwd, mma_bwd] = TimeInterleaved(
      with(FlashKernels::kWmma, [&] { backward(qkv, out.y, out.lse, dy, T, H, {}); }),
      with(FlashKernels::kMma, [&] { backward(qkv, out.y, out.lse, dy, T, H, {}); }));
  // Dropout on the probabilities (nanoGPT's attn_dropout at 0.1): the
  // kernels' mask costs a hash per probability, forward and backward.
  const engine::backend::AttentionDropout drop{0.1, 7};
  const auto [wmma_drop, mma_drop] =
      TimeInterleaved(with(FlashKernels::kWmma,
                           [&] {
                             const engine::backend::AttentionResult r = forward(qkv, T, H, drop);
                             backward(qkv, r.y, r.lse, dy, T, H, drop);
                           }),
                      with(FlashKernels::kMma, [&] {
                        const engine::backend::AttentionResult r = forward(qkv, T, H, drop);
                        backward(qkv, r.y, r.lse, dy, T, H, drop);
                      }));
  engine::cuda::SetFlashKernels(initial);
  const double fwd_flops = 2.0 * B * H * T * T * (C / H), bwd_flops = 2.5 * fwd_flops;
  std::printf(
      "attention bf16 B=%lld T=%lld H=%lld D=%lld: forward mma.sync %.3f ms (%.0f TFLOP/s), "
      "WMMA %.3f ms (%.0f), WMMA/mma %.2fx; backward mma.sync %.3f ms (%.0f TFLOP/s), WMMA "
      "%.3f ms (%.0f), WMMA/mma %.2fx\n",
      (long long)B, (long long)T, (long long)H, (long long)(C / H), mma_fwd * 1e3,
      fwd_flops / mma_fwd / 1e12, wmma_fwd * 1e3, fwd_flops / wmma_fwd / 1e12, wmma_fwd / mma_fwd,
      mma_bwd * 1e3, bwd_flops / mma_bwd / 1e12, wmma_bwd * 1e3, bwd_flops / wmma_bwd / 1e12,
      wmma_bwd / mma_bwd);
  std::printf(
      "RESULT attention kernels=mma fwd_ms=%.4f bwd_ms=%.4f\nRESULT attention kernels=wmma "
      "fwd_ms=%.4f bwd_ms=%.4f\n",
      mma_fwd * 1e3, mma_bwd * 1e3, wmma_fwd * 1e3, wmma_bwd * 1e3);
  std::printf(
      "RESULT attention_dropout p=0.1 mma_fwd_bwd_ms=%.4f mma_vs_undropped=%.3f "
      "wmma_fwd_bwd_ms=%.4f wmma_vs_undropped=%.3f\n",
      mma_drop * 1e3, mma_drop / (mma_fwd + mma_bwd), wmma_drop * 1e3,
      wmma_drop / (wmma_fwd + wmma_bwd));
  std::fflush(stdout);
  return agree;
}

// GPT-2's training step on the GPU in `precision`; random tokens (the step
// costs the same whatever they are). *step_s: the median step's seconds.
// `kind` names its RESULT line (gpt, gpt_fp8, gpt_mma) and its profile.
int BenchGpt(const Options& o, const std::string& precision, const char* kind, double* step_s) {
  const engine::nn::GptSpec& g = o.gpt;
  std::vector<uint32_t> ids(static_cast<size_t>(g.block_size + 1) * o.gpt_batch * 16);
  uint64_t x = 88172645463325252ull;
  for (uint32_t& id : ids) {  // xorshift: no dependence on <random>'s distributions
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    id = static_cast<uint32_t>(x % static_cast<uint64_t>(g.vocab_size));
  }
  const engine::data::TokenSequence tokens = engine::data::TokenSequence::FromU32(ids, "random");
  engine::train::TokenData data;
  data.train = {&tokens};
  engine::train::TrainerConfig c;
  c.model = g;
  c.precision = *engine::amp::ResolvePrecision(precision);
  c.optimizer.lr = 6e-4;
  c.optimizer.weight_decay = 0.1;
  c.training.steps = 1 << 30;
  c.training.batch_size = o.gpt_batch;
  c.training.clip_norm = 1.0;
  c.device = engine::Device::kCuda;
  absl::StatusOr<std::unique_ptr<engine::train::Trainer>> t =
      engine::train::Trainer::Create(c, data);
  if (!t.ok()) {
    std::fprintf(stderr, "gpu_bench: gpt: %s\n", std::string(t.status().message()).c_str());
    return 1;
  }
  for (int i = 0; i < 2; ++i) (*t)->RunStep();  // warm-up: plans, allocator
  std::vector<double> per_step;
  for (int64_t r = 0; r < o.rounds; ++r) {
    const auto t0 = Clock::now();
    for (int64_t s = 0; s < o.steps; ++s) (*t)->RunStep();
    per_step.push_back(Seconds(t0, Clock::now()) / o.steps);
  }
  const double step = Median(per_step);
  *step_s = step;
  const double tokens_per_s = static_cast<double>(o.gpt_batch * g.block_size) / step;
  const double mfu = tokens_per_s * engine::nn::GptFlopsPerToken(g) / (o.peak_tflops * 1e12);
  std::printf(
      "\ngpt_step: %lld layers x %lld, %lld heads, block %lld, vocab %lld (%lld parameters), "
      "batch %lld, %s, AdamW: %.1f ms/step, %.0f tokens/s, MFU %.1f%% of %.0f TFLOP/s "
      "(target >= 45%% in bf16-mixed)\n",
      (long long)g.n_layer, (long long)g.n_embd, (long long)g.n_head, (long long)g.block_size,
      (long long)g.vocab_size, (long long)engine::nn::GptParameterCount(g), (long long)o.gpt_batch,
      precision.c_str(), step * 1e3, tokens_per_s, 100 * mfu, o.peak_tflops);
  std::printf("RESULT %s layers=%lld embd=%lld block=%lld batch=%lld tokens_per_s=%.1f mfu=%.4f\n",
              kind, (long long)g.n_layer, (long long)g.n_embd, (long long)g.block_size,
              (long long)o.gpt_batch, tokens_per_s, mfu);
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_profile)) {
    ProfileSteps(
        ("gpt_step " + precision + (std::string(kind) == "gpt_mma" ? " mma.sync" : "")).c_str(),
        **t);
  }
  return 0;
}

}  // namespace

int RunBenchmarks(const Options& o) {
  absl::StatusOr<engine::backend::Backend*> gpu =
      engine::backend::BackendFor(engine::Device::kCuda);
  if (!gpu.ok()) {
    std::printf("SKIPPED gpu_bench: no usable GPU: %s\n",
                std::string(gpu.status().message()).c_str());
    return 0;
  }
  std::string why;
  for (const engine::cuda::CudaDeviceInfo& d : engine::cuda::ListCudaDevices(&why)) {
    std::printf("device %d: %s, compute capability %d.%d, %.1f GiB, %d SMs\n", d.index,
                d.name.c_str(), d.major, d.minor, d.memory_bytes / double(1 << 30),
                d.multiprocessors);
  }
  const double cublas = BenchGemm(**gpu, o.gemm);
  const std::vector<engine::cuda::CudaDeviceInfo> devices = engine::cuda::ListCudaDevices(nullptr);
  const bool fp8 = !devices.empty() && devices[0].fp8;
  if (fp8) {
    BenchFp8Gemm(**gpu, o.gemm, cublas);
  } else {
    std::printf("SKIPPED fp8 gemm: no FP8 tensor cores (compute capability < 8.9)\n");
  }

  engine::data::SyntheticSpec spec;
  spec.num_examples = o.batch * 8;
  spec.feature_dim = kInput;
  spec.num_classes = kClasses;
  spec.seed = 3;
  absl::StatusOr<engine::data::Dataset> data = engine::data::MakeSyntheticDataset(spec);
  if (!data.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  const std::vector<std::string> modes = {"32-true", "bf16-mixed", "16-mixed"};
  std::printf(
      "\nmlp_step: [%lld] -> hidden x2 -> [%lld], batch %lld, AdamW; median of %lld "
      "rounds of %lld steps\n",
      (long long)kInput, (long long)kClasses, (long long)o.batch, (long long)o.rounds,
      (long long)o.steps);
  std::printf("%-8s %-11s %12s %10s %9s %8s %8s\n", "hidden", "precision", "samples/s", "step ms",
              "TFLOP/s", "%cuBLAS", "%peak");
  for (int64_t h : o.hidden) {
    const double weights = double(kInput) * h + double(h) * h + double(h) * kClasses;
    const double flops_per_step = 6.0 * o.batch * weights;
    std::vector<std::unique_ptr<engine::train::Trainer>> trainers;
    for (const std::string& mode : modes) {
      absl::StatusOr<std::unique_ptr<engine::train::Trainer>> t =
          engine::train::Trainer::Create(Config(mode, h, o.batch), &*data, nullptr);
      if (!t.ok()) {
        std::fprintf(stderr, "gpu_bench: %s: %s\n", mode.c_str(),
                     std::string(t.status().message()).c_str());
        return 1;
      }
      for (int i = 0; i < 3; ++i) (*t)->RunStep();  // warm-up: plans, allocator
      trainers.push_back(*std::move(t));
    }
    std::vector<std::vector<double>> per_step(modes.size());
    for (int64_t r = 0; r < o.rounds; ++r) {
      for (size_t i = 0; i < modes.size(); ++i) {
        const size_t m = (i + r) % modes.size();
        const auto t0 = Clock::now();
        for (int64_t s = 0; s < o.steps; ++s) trainers[m]->RunStep();  // each ends in a host read
        per_step[m].push_back(Seconds(t0, Clock::now()) / o.steps);
      }
    }
    if (absl::Status health = (*gpu)->Health(); !health.ok()) {
      std::fprintf(stderr, "gpu_bench: %s\n", health.ToString().c_str());
      return 1;
    }
    double fp32_rate = 0;
    for (size_t m = 0; m < modes.size(); ++m) {
      const double step = Median(per_step[m]);
      const double tflops = flops_per_step / step / 1e12;
      const double samples = o.batch / step;
      if (modes[m] == "32-true") fp32_rate = samples;
      std::printf("%-8lld %-11s %12.0f %10.3f %9.1f %7.1f%% %7.1f%%\n", (long long)h,
                  modes[m].c_str(), samples, step * 1e3, tflops, 100 * tflops / cublas,
                  100 * tflops / o.peak_tflops);
      std::printf("RESULT mlp hidden=%lld precision=%s samples_per_s=%.1f tflops=%.2f\n",
                  (long long)h, modes[m].c_str(), samples, tflops);
    }
    const double bf16 = o.batch / Median(per_step[1]);
    std::printf("hidden %lld: bf16-mixed / 32-true = %.2fx (target >= 3x)\n", (long long)h,
                bf16 / fp32_rate);
    if (absl::GetFlag(FLAGS_profile) && h == o.hidden.back()) {
      const std::string what = "mlp_step hidden " + std::to_string(h) + " bf16-mixed";
      ProfileSteps(what.c_str(), *trainers[1]);
      ProfileSteps(("mlp_step hidden " + std::to_string(h) + " 32-true").c_str(), *trainers[0]);
    }
  }
  if (o.gpt.n_layer > 0) {
    double bf16_step = 0, fp8_step = 0;
    engine::cuda::SetFlashKernels(engine::cuda::FlashKernels::kWmma);
    std::printf("\ngpt_step attention kernels: WMMA\n");
    if (int rc = BenchGpt(o, "bf16-mixed", "gpt", &bf16_step); rc != 0) return rc;
    if (fp8) {
      // Transformer Engine's recipe: E4M3 forward, E5M2 gradients, delayed scaling.
      if (int rc = BenchGpt(o, "fp8-hybrid", "gpt_fp8", &fp8_step); rc != 0) return rc;
      std::printf("gpt_step: bf16-mixed / fp8-hybrid = %.2fx (target >= 1.3x)\n",
                  bf16_step / fp8_step);
    } else {
      std::printf("SKIPPED gpt_step fp8-hybrid: no FP8 tensor cores\n");
    }
    if (absl::Status health = (*gpu)->Health(); !health.ok()) {
      std::fprintf(stderr, "gpu_bench: %s\n", health.ToString().c_str());
      return 1;
    }
    if (o.gpt_mma) {
      const bool agree = BenchAttention(o);
      if (absl::Status health = (*gpu)->Health(); !health.ok()) {
        std::fprintf(stderr, "gpu_bench: after the mma.sync attention kernels: %s\n",
                     health.ToString().c_str());
        return 1;
      }
      if (agree) {
        double mma_step = 0;
        engine::cuda::SetFlashKernels(engine::cuda::FlashKernels::kMma);
        std::printf("\ngpt_step attention kernels: mma.sync\n");
        if (int rc = BenchGpt(o, "bf16-mixed", "gpt_mma", &mma_step); rc != 0) return rc;
        engine::cuda::SetFlashKernels(engine::cuda::FlashKernels::kWmma);
        std::printf("gpt_step bf16-mixed: WMMA's step / mma.sync's = %.2fx\n",
                    bf16_step / mma_step);
      } else {
        std::printf("SKIPPED gpt_step with mma.sync attention: its outputs disagree with WMMA's\n");
      }
    }
  }
  const engine::cuda::AllocatorStats st = engine::cuda::CudaMemoryStats();
  std::printf(
      "\ndevice allocator: peak in use %.1f MiB, cached %.1f MiB, %lld cudaMalloc calls, "
      "%lld cache hits\n",
      st.peak_in_use_bytes / 1048576.0, st.cached_bytes / 1048576.0,
      (long long)st.device_allocations, (long long)st.cache_hits);
  return 0;
}

}  // namespace ampd::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpu_bench: GEMM rate and the MLP training step on CUDA (see bench/README.md)");
  absl::ParseCommandLine(argc, argv);
  // Line by line even into a pipe: a run cut short by a time limit keeps
  // what it measured.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  ampd::bench::Options o;
  o.hidden.clear();
  bool ok = true;
  for (const std::string& part : absl::GetFlag(FLAGS_hidden)) {
    int64_t h = 0;
    ok &= absl::SimpleAtoi(part, &h) && h > 0;
    o.hidden.push_back(h);
  }
  o.batch = absl::GetFlag(FLAGS_batch);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.gemm = absl::GetFlag(FLAGS_gemm);
  o.peak_tflops = absl::GetFlag(FLAGS_peak_tflops);
  o.gpt.n_layer = absl::GetFlag(FLAGS_gpt_layers);
  o.gpt.n_embd = absl::GetFlag(FLAGS_gpt_embd);
  o.gpt.n_head = absl::GetFlag(FLAGS_gpt_heads);
  o.gpt.block_size = absl::GetFlag(FLAGS_gpt_block);
  o.gpt.vocab_size = absl::GetFlag(FLAGS_gpt_vocab);
  o.gpt_batch = absl::GetFlag(FLAGS_gpt_batch);
  const std::string attention = absl::GetFlag(FLAGS_gpt_attention);
  if (attention != "both" && attention != "wmma") {
    std::fprintf(stderr, "gpu_bench: --gpt_attention must be both or wmma, not \"%s\"\n",
                 attention.c_str());
    return 2;
  }
  o.gpt_mma = attention == "both";
  if (o.gpt.n_layer > 0) {
    if (absl::Status s = ampd::engine::nn::ValidateGpt(o.gpt); !s.ok() || o.gpt_batch <= 0) {
      std::fprintf(stderr, "gpu_bench: bad GPT flags: %s\n",
                   s.ok() ? "--gpt_batch must be positive" : std::string(s.message()).c_str());
      return 2;
    }
  }
  if (!ok || o.hidden.empty() || o.batch <= 0 || o.steps <= 0 || o.rounds <= 0 || o.gemm <= 0 ||
      o.peak_tflops <= 0) {
    std::fprintf(stderr, "gpu_bench: every flag must be positive (--helpfull lists them)\n");
    return 2;
  }
  return ampd::bench::RunBenchmarks(o);
}
