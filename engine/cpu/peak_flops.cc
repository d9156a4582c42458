#include "engine/cpu/peak_flops.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/cpu/cpu_backend_impl.h"

namespace ampd::engine::cpu {

double MeasureBf16GemmFlops(int n, int min_repeats, double min_seconds) {
  CpuBackendImpl& be = CpuBackendImpl::Instance();
  std::vector<double> values(static_cast<size_t>(n) * n);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 7) * 0.25 - 0.75;
  const Tensor a = Tensor::FromDoubles(values, {n, n}, DType::kBF16);
  const Tensor b = Tensor::FromDoubles(values, {n, n}, DType::kBF16);
  be.Matmul(a, b, false, true, DType::kBF16);  // warm-up: oneDNN's primitive is built here
  double best = 0;
  const auto begin = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  for (int r = 0; r < std::max(1, min_repeats) || since(begin) < min_seconds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    be.Matmul(a, b, false, true, DType::kBF16);
    const double s = since(start);
    if (s > 0) best = std::max(best, 2.0 * n * n * static_cast<double>(n) / s);
  }
  return best;
}

double MeasuredBf16GemmFlops() {
  // 1024^3 is large enough for oneDNN to reach its steady rate on a few
  // cores and small enough (2 GFLOP) to take milliseconds per repetition.
  static const double flops = MeasureBf16GemmFlops(1024, 5, 0.3);
  return flops;
}

double CpuBackendImpl::PeakFlops() { return MeasuredBf16GemmFlops(); }

}  // namespace ampd::engine::cpu
