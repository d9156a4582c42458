// Blockwise 8-bit (de)quantization of optimizer states on the CPU
// (engine/cpu/blockwise_quant.h): ns per value of each path, scalar and
// AVX-512, measured side by side on the same data (one thread), by default
// on one kernel block (2048 values, in L1) as the optimizer steps use it.
// Then the whole AdamW step over --step_params values (the MLP benchmark's
// 5.8 M weights by default, both threads), 32-bit states against 8-bit
// ones (with each of the fused block's two coders), side by side: the
// optimizer's share of engine_bench's adamw8bit row.
//   bazel run -c opt //bench:quant_bench [-- --values=2048 --calls=2000 --rounds=7]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/backend/quant_map.h"
#include "engine/core/tensor.h"
#include "engine/cpu/adamw8bit_coder.h"
#include "engine/cpu/blockwise_quant.h"

ABSL_FLAG(int64_t, values, 2048, "Values per call (2048: one CPU kernel block, in L1)");
ABSL_FLAG(int64_t, calls, 2000, "Calls per timed round");
ABSL_FLAG(int64_t, rounds, 7, "Interleaved rounds (the median is reported)");
ABSL_FLAG(int64_t, step_params, 784 * 2048 + 2048 * 2048 + 2048 * 10,
          "Values in the AdamW step section (0: skip it)");
ABSL_FLAG(int64_t, steps, 10, "AdamW steps per timed round");

namespace {

using ampd::engine::cpu::FusedCoder;
using ampd::engine::cpu::FusedCoderName;
using ampd::engine::cpu::QuantPath;
using ampd::engine::cpu::ResolvedFusedCoder;
using ampd::engine::cpu::SetFusedCoder;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ms per AdamW step over n values, 32-bit states and 8-bit ones, interleaved.
void BenchAdamWSteps(int64_t n, int64_t rounds, int64_t steps) {
  namespace backend = ampd::engine::backend;
  using ampd::engine::core::DType;
  using ampd::engine::core::Tensor;
  using Clock = std::chrono::steady_clock;
  backend::Backend* be = *backend::BackendFor(ampd::engine::core::Device::kCpu);
  auto adamw8bit = backend::Kernel<backend::AdamW8bitStepKernel>(ampd::engine::core::Device::kCpu);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> init(n);
  for (float& v : init) v = normal(rng);
  Tensor grad = Tensor::FromVector(init, {n}, DType::kF32);
  Tensor p32 = grad.Clone(), p8 = grad.Clone();
  Tensor m = Tensor::Zeros({n}, DType::kF32), v = Tensor::Zeros({n}, DType::kF32);
  const int64_t blocks = backend::QuantBlocks(n);
  Tensor mc = Tensor::Zeros({n}, DType::kU8), vc = Tensor::Zeros({n}, DType::kU8);
  Tensor ma = Tensor::Zeros({blocks}, DType::kF32), va = Tensor::Zeros({blocks}, DType::kF32);
  backend::DeviceAmp::AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  // Both coders of the fused block, forced in turn (same codes, own states).
  const FusedCoder chosen = ResolvedFusedCoder();
  struct EightBit {
    FusedCoder coder;
    Tensor p, mc, vc, ma, va;
    std::vector<double> ms;
  };
  EightBit eight[] = {{FusedCoder::kSearch, p8, mc, vc, ma, va, {}},
                      {FusedCoder::kGather,
                       grad.Clone(),
                       Tensor::Zeros({n}, DType::kU8),
                       Tensor::Zeros({n}, DType::kU8),
                       Tensor::Zeros({blocks}, DType::kF32),
                       Tensor::Zeros({blocks}, DType::kF32),
                       {}}};
  std::vector<double> t32;
  int64_t step = 0;
  // ms per step of `steps` calls of update(h), h.step counting on from `step`.
  auto time = [&](const auto& update) {
    const Clock::time_point t = Clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      h.step = step + s + 1;
      update();
    }
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count() / steps;
  };
  for (int64_t r = 0; r < rounds + 1; ++r) {  // round 0 warms up
    const double ms32 = time([&] { be->AdamWStep(p32, grad, m, v, h); });
    if (r > 0) t32.push_back(ms32);
    for (EightBit& e : eight) {
      SetFusedCoder(e.coder);
      const double ms = time([&] {
        adamw8bit(e.p, grad, e.mc, e.ma, e.vc, e.va, h, backend::DeviceAmp::FusedStepArgs{});
      });
      if (r > 0) e.ms.push_back(ms);
    }
    SetFusedCoder(FusedCoder::kAuto);
    step += steps;
  }
  std::printf("\nAdamW step over %lld values, median of %lld rounds x %lld steps\n",
              static_cast<long long>(n), static_cast<long long>(rounds),
              static_cast<long long>(steps));
  std::printf("states                 step ms  vs 32-bit\n");
  std::printf("32-bit                 %7.3f  %8.2fx\n", Median(t32), 1.0);
  for (const EightBit& e : eight) {
    std::printf("8-bit, %-15s %7.3f  %8.2fx\n", FusedCoderName(e.coder), Median(e.ms),
                Median(e.ms) / Median(t32));
  }
  std::printf(
      "(the fused 8-bit block uses %s here: its first-use timing's choice;\n"
      " both coders need AVX-512 VBMI, and give the same codes)\n",
      FusedCoderName(chosen));
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t n = absl::GetFlag(FLAGS_values);
  const int64_t rounds = std::max<int64_t>(1, absl::GetFlag(FLAGS_rounds));
  const int64_t calls = std::max<int64_t>(1, absl::GetFlag(FLAGS_calls));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> x(n), back(n);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> codes(n);
  std::vector<float> absmax(ampd::engine::backend::QuantBlocks(n));
  const auto& map = ampd::engine::backend::DynamicMap();
  std::vector<QuantPath> paths = {QuantPath::kScalar};
  for (QuantPath p : {QuantPath::kAvx2, QuantPath::kAvx512, QuantPath::kAvx512Vbmi}) {
    if (ampd::engine::cpu::HasQuantPath(p)) paths.push_back(p);
  }
  std::vector<std::vector<double>> quant(paths.size()), dequant(paths.size());
  for (int64_t r = 0; r < rounds; ++r) {
    for (size_t p = 0; p < paths.size(); ++p) {
      Clock::time_point t = Clock::now();
      for (int64_t c = 0; c < calls; ++c) {
        ampd::engine::cpu::QuantizeBlocks(map, x.data(), n, codes.data(), absmax.data(), paths[p]);
      }
      quant[p].push_back(std::chrono::duration<double>(Clock::now() - t).count() * 1e9 /
                         static_cast<double>(n * calls));
      t = Clock::now();
      for (int64_t c = 0; c < calls; ++c) {
        ampd::engine::cpu::DequantizeBlocks(map, codes.data(), absmax.data(), n, back.data(),
                                            paths[p]);
      }
      dequant[p].push_back(std::chrono::duration<double>(Clock::now() - t).count() * 1e9 /
                           static_cast<double>(n * calls));
    }
  }
  std::printf(
      "blockwise 8-bit coding, %lld calls of %lld values (signed dynamic map), median of "
      "%lld rounds\n",
      static_cast<long long>(calls), static_cast<long long>(n), static_cast<long long>(rounds));
  std::printf("%-12s %14s %16s\n", "path", "quantize ns/v", "dequantize ns/v");
  for (size_t p = 0; p < paths.size(); ++p) {
    std::printf("%-12s %14.3f %16.3f\n", ampd::engine::cpu::QuantPathName(paths[p]),
                Median(quant[p]), Median(dequant[p]));
  }
  if (absl::GetFlag(FLAGS_step_params) > 0) {
    BenchAdamWSteps(absl::GetFlag(FLAGS_step_params), rounds,
                    std::max<int64_t>(1, absl::GetFlag(FLAGS_steps)));
  }
  return 0;
}
