// GPT training steps on this CPU: tokens/s and MFU in 32-true and
// bf16-mixed (bf16 autocast over f32 weights, as torch.autocast), and, when
// PyTorch is importable (bench/torch_gpt_bench.py), PyTorch eager on the same
// model, batch and precision with the ratio. Precisions (and PyTorch)
// interleave round by round; medians are reported.
//
//   bazel run -c opt //bench:gpt_bench
//   bazel run -c opt //bench:gpt_bench -- --torch_python=/path/to/venv/bin/python3
//   bazel run -c opt //bench:gpt_bench -- --dropout=0.1   # nanoGPT's dropout, both sides
//
// The model is the brief's byte-level GPT (4 layers x 256, 4 heads, block
// 128, batch 32) on the fortunes corpus (random tokens when it is missing).
// MFU is model FLOPs (6 N + 12 L T C per token) over the CPU's peak, taken
// here as the best bf16 GEMM rate measured in this run (oneDNN, 2048^3).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bench/kernel_profile.h"
#include "bench/torch_step.h"
#include "engine/autograd/autograd.h"
#include "engine/cpu/bf16_gemm_route.h"
#include "engine/cpu/capabilities.h"
#include "engine/cpu/host_memory.h"
#include "engine/cpu/peak_flops.h"
#include "engine/data/text_tokens.h"
#include "engine/data/token_windows.h"
#include "engine/nn/gpt.h"
#include "engine/ops/autocast.h"
#include "engine/optim/optimizer.h"

ABSL_FLAG(int64_t, steps, 5, "Timed steps per precision per round");
ABSL_FLAG(int64_t, rounds, 3, "Interleaved rounds (the median is reported)");
ABSL_FLAG(int64_t, warmup, 2, "Untimed steps per precision first");
ABSL_FLAG(int64_t, batch, 32, "Sequences per step");
ABSL_FLAG(int64_t, block, 128, "Sequence length");
ABSL_FLAG(int64_t, layers, 4, "Transformer blocks");
ABSL_FLAG(int64_t, embd, 256, "Embedding width");
ABSL_FLAG(int64_t, heads, 4, "Attention heads");
ABSL_FLAG(double, dropout, 0.0,
          "The model's dropout (embeddings, attention probabilities, projections), also "
          "PyTorch's");
ABSL_FLAG(std::string, torch_python, "python3",
          "Python with torch for bench/torch_gpt_bench.py (skipped when torch is not importable)");
ABSL_FLAG(bool, no_torch, false, "Do not run the PyTorch comparison");
ABSL_FLAG(bool, profile, false,
          "Then two more steps per precision with every kernel timed: ms per step by kernel "
          "and the costliest calls by arguments (bench/kernel_profile.h)");
ABSL_FLAG(std::string, precisions, "32-true,bf16-mixed",
          "Comma-separated precisions to run (32-true, bf16-mixed); one alone is for profiling. "
          "bf16-mixed:native is bf16-mixed with oneDNN's bf16 matmul for every bf16 GEMM, "
          "whatever the CPU's chosen route (engine/cpu/bf16_gemm_route.h), to compare the two "
          "in one run");

namespace ampd::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace nn = engine::nn;
namespace data = engine::data;
using engine::DType;
using engine::Tensor;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The best of a few bf16 2048^3 GEMMs (f32 accumulation and output).
// The engine's measurement (engine/cpu/peak_flops.h), on a larger GEMM and
// for longer than the server's: the best repetition over 0.5 s.
double PeakBf16Gflops() { return engine::cpu::MeasureBf16GemmFlops(2048, 5, 0.5) / 1e9; }

struct Run {
  std::unique_ptr<nn::Gpt> gpt;
  std::unique_ptr<engine::optim::Optimizer> opt;
  bool bf16 = false;
  bool native_gemms = false;  // bf16 GEMMs forced onto oneDNN's bf16 matmul
  std::vector<double> step_s;
  double last_loss = 0;
};

void Step(Run& r, data::TokenWindows& windows, int64_t batch) {
  const data::TokenBatch b = windows.Next(batch);
  r.opt->ZeroGrad();
  Tensor loss;
  engine::cpu::SetBf16GemmRouteForTesting(r.native_gemms ? engine::cpu::Bf16GemmOverride::kNative
                                                         : engine::cpu::Bf16GemmOverride::kDefault);
  {
    engine::ops::AutocastScope autocast(r.bf16, DType::kBF16);
    loss = r.gpt->Loss(b.inputs, b.targets, b.batch, b.block, true);
  }
  engine::autograd::Backward(loss);
  r.opt->CollectGradients();
  r.opt->Step(1e-3);
  r.last_loss = loss.Item();
  engine::cpu::SetBf16GemmRouteForTesting(engine::cpu::Bf16GemmOverride::kDefault);
}

// PyTorch eager on the same model and precision: ms per step, or -1.
double TorchStepMs(const std::string& precision) {
  return bench::TorchStepMs(
      absl::GetFlag(FLAGS_torch_python), "torch_gpt_bench.py",
      absl::StrCat(
          "--precision=", precision, " --batch=", absl::GetFlag(FLAGS_batch),
          " --block=", absl::GetFlag(FLAGS_block), " --layers=", absl::GetFlag(FLAGS_layers),
          " --embd=", absl::GetFlag(FLAGS_embd), " --heads=", absl::GetFlag(FLAGS_heads),
          " --dropout=", absl::GetFlag(FLAGS_dropout), " --steps=", absl::GetFlag(FLAGS_steps),
          " --warmup=", absl::GetFlag(FLAGS_warmup)),
      "torch_gpt");
}

int Main() {
  nn::GptSpec spec;
  spec.vocab_size = 256;
  spec.block_size = absl::GetFlag(FLAGS_block);
  spec.n_layer = absl::GetFlag(FLAGS_layers);
  spec.n_embd = absl::GetFlag(FLAGS_embd);
  spec.n_head = absl::GetFlag(FLAGS_heads);
  spec.dropout = absl::GetFlag(FLAGS_dropout);
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  absl::StatusOr<std::string> text = data::ReadFortunes();
  data::TokenSequence tokens;
  if (text.ok()) {
    tokens = data::ByteTokens(*text, "fortunes");
  } else {
    std::vector<uint16_t> random(1 << 20);
    std::mt19937 gen(3);
    for (uint16_t& t : random) t = gen() % 256;
    tokens = data::TokenSequence::FromU16(std::move(random), "random");
  }
  const double peak = PeakBf16Gflops();
  const double flops_per_token = nn::GptFlopsPerToken(spec);
  std::printf(
      "gpt_bench: %lld layers x %lld, %lld heads, block %lld, batch %lld on %s; %.2fM "
      "parameters; CPU bf16 GEMM peak %.0f GFLOP/s\n",
      static_cast<long long>(spec.n_layer), static_cast<long long>(spec.n_embd),
      static_cast<long long>(spec.n_head), static_cast<long long>(spec.block_size),
      static_cast<long long>(batch), tokens.name().c_str(), nn::GptParameterCount(spec) / 1e6,
      peak);
  std::printf("%s\n", engine::cpu::ChosenBf16GemmRoute().why.c_str());
  constexpr int kRuns = 3;
  Run runs[kRuns];
  const char* names[kRuns] = {"32-true", "bf16-mixed", "bf16-mixed:native"};
  bool wanted[kRuns] = {false, false, false};
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_precisions), ',')) {
    const int i = static_cast<int>(std::find(names, names + kRuns, p) - names);
    if (i == 2 && !engine::cpu::ProbeCpu().bf16_matmul) {
      std::fprintf(stderr, "gpt_bench: bf16-mixed:native: no oneDNN bf16 matmul on this CPU\n");
      return 2;
    }
    if (i < kRuns) {
      wanted[i] = true;
    } else {
      std::fprintf(stderr, "gpt_bench: --precisions: unknown precision '%.*s'\n",
                   static_cast<int>(p.size()), p.data());
      return 2;
    }
  }
  std::vector<data::TokenWindows> windows;
  for (int i = 0; i < kRuns; ++i) {
    runs[i].gpt = *nn::Gpt::Build(spec, 1);
    runs[i].bf16 = i >= 1;
    runs[i].native_gemms = i == 2;
    engine::optim::OptimizerSpec o;
    o.lr = 1e-3;
    runs[i].opt = std::make_unique<engine::optim::Optimizer>(o, &runs[i].gpt->parameters(), false);
    windows.push_back(*data::TokenWindows::Create({&tokens}, spec.block_size, 5));
    if (!wanted[i]) continue;
    for (int64_t s = 0; s < absl::GetFlag(FLAGS_warmup); ++s) Step(runs[i], windows[i], batch);
  }
  const bool torch = !absl::GetFlag(FLAGS_no_torch);
  std::vector<double> torch_ms[kRuns];
  for (int64_t round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (int i = 0; i < kRuns; ++i) {
      if (!wanted[i]) continue;
      const auto t0 = Clock::now();
      for (int64_t s = 0; s < absl::GetFlag(FLAGS_steps); ++s) Step(runs[i], windows[i], batch);
      runs[i].step_s.push_back(Seconds(t0, Clock::now()) / absl::GetFlag(FLAGS_steps));
      if (torch && i < 2) {  // PyTorch has one bf16-mixed
        const double ms = TorchStepMs(names[i]);
        if (ms > 0) torch_ms[i].push_back(ms);
      }
    }
  }
  std::printf("%-17s %9s %10s %7s %9s %12s %8s\n", "precision", "step ms", "tokens/s", "MFU",
              "loss", "torch ms", "ratio");
  for (int i = 0; i < kRuns; ++i) {
    if (!wanted[i]) continue;
    const double s = Median(runs[i].step_s);
    const double tps = batch * spec.block_size / s;
    const double mfu = flops_per_token * tps / (peak * 1e9);
    const std::string t = torch_ms[i].empty() ? "-" : absl::StrCat(Median(torch_ms[i]));
    const std::string ratio =
        torch_ms[i].empty() ? "-" : absl::StrCat(Median(torch_ms[i]) / (1e3 * s), "x");
    std::printf("%-17s %9.1f %10.0f %6.1f%% %9.4f %12s %8s\n", names[i], 1e3 * s, tps, 100 * mfu,
                runs[i].last_loss, t.c_str(), ratio.c_str());
    std::printf("RESULT gpt_bench precision=%s step_ms=%.2f tokens_per_s=%.0f mfu=%.4f%s\n",
                names[i], 1e3 * s, tps, mfu,
                torch_ms[i].empty()
                    ? ""
                    : absl::StrCat(" torch_step_ms=", Median(torch_ms[i]),
                                   " ratio_vs_torch=", Median(torch_ms[i]) / (1e3 * s))
                          .c_str());
  }
  if (wanted[1] && wanted[2]) {
    const double ratio = Median(runs[2].step_s) / Median(runs[1].step_s);
    std::printf("bf16-mixed with this CPU's %s bf16 GEMMs: %.2fx the speed of native ones\n",
                engine::cpu::Bf16GemmRouteName(engine::cpu::ChosenBf16GemmRoute().route), ratio);
    std::printf("RESULT gpt_bench bf16_gemm_route=%s vs_native=%.4f\n",
                engine::cpu::Bf16GemmRouteName(engine::cpu::ChosenBf16GemmRoute().route), ratio);
  }
  if (torch && torch_ms[0].empty() && torch_ms[1].empty()) {
    std::printf("PyTorch comparison skipped: torch is not importable by %s\n",
                absl::GetFlag(FLAGS_torch_python).c_str());
  }
  if (absl::GetFlag(FLAGS_profile)) {
    InstallKernelProfile(engine::core::Device::kCpu, nullptr);
    for (int i = 0; i < kRuns; ++i) {
      if (!wanted[i]) continue;
      ProfileSteps(absl::StrCat("gpt_bench ", names[i]).c_str(), 2,
                   [&] { Step(runs[i], windows[i], batch); });
    }
  }
  return 0;
}

}  // namespace
}  // namespace ampd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ampd::engine::cpu::KeepHostMemoryMapped();
  return ampd::bench::Main();
}
