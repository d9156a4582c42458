// Blockwise 8-bit (de)quantization of optimizer states on the CPU
// (engine/cpu/blockwise_quant.h): ns per value of each path, scalar and
// AVX-512, measured side by side on the same data (one thread), by default
// on one kernel block (2048 values, in L1) as the optimizer steps use it.
//   bazel run -c opt //bench:quant_bench [-- --values=2048 --calls=2000 --rounds=7]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/backend/quant_map.h"
#include "engine/cpu/blockwise_quant.h"

ABSL_FLAG(int64_t, values, 2048, "Values per call (2048: one CPU kernel block, in L1)");
ABSL_FLAG(int64_t, calls, 2000, "Calls per timed round");
ABSL_FLAG(int64_t, rounds, 7, "Interleaved rounds (the median is reported)");

namespace {

using ampd::engine::cpu::QuantPath;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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
  for (QuantPath p : {QuantPath::kAvx2, QuantPath::kAvx512}) {
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
  std::printf("%-8s %14s %16s\n", "path", "quantize ns/v", "dequantize ns/v");
  for (size_t p = 0; p < paths.size(); ++p) {
    std::printf("%-8s %14.3f %16.3f\n", ampd::engine::cpu::QuantPathName(paths[p]),
                Median(quant[p]), Median(dequant[p]));
  }
  return 0;
}
