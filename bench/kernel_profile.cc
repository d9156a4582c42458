#include "bench/kernel_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/kernel_registry.h"

namespace ampd::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct KernelTime {
  int64_t calls = 0;
  double seconds = 0;
};
struct Frame {
  Clock::time_point start;
  double children = 0;
};

std::map<std::string, KernelTime>& Times() {
  static auto* m = new std::map<std::string, KernelTime>();
  return *m;
}
std::vector<Frame>& Stack() {
  static auto* s = new std::vector<Frame>();
  return *s;
}
bool profiling = false;
void (*device_sync)() = nullptr;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void BeforeKernel(const char*) {
  if (!profiling) return;
  if (device_sync != nullptr) device_sync();
  Stack().push_back({Clock::now(), 0});
}

void AfterKernel(const char* name) {
  if (!profiling || Stack().empty()) return;
  if (device_sync != nullptr) device_sync();
  const Frame f = Stack().back();
  Stack().pop_back();
  const double total = Seconds(f.start, Clock::now());
  KernelTime& k = Times()[name];
  k.calls += 1;
  k.seconds += total - f.children;
  if (!Stack().empty()) Stack().back().children += total;
}

void PrintProfile(double step_seconds, int64_t steps) {
  // By kernel (the detail's first word), then the costliest calls by shape.
  std::map<std::string, KernelTime> by_kernel;
  for (const auto& [detail, k] : Times()) {
    KernelTime& sum = by_kernel[detail.substr(0, detail.find(' '))];
    sum.calls += k.calls;
    sum.seconds += k.seconds;
  }
  auto sorted = [](const std::map<std::string, KernelTime>& m) {
    std::vector<std::pair<std::string, KernelTime>> rows(m.begin(), m.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    return rows;
  };
  double kernels = 0;
  std::printf(" %lld steps, %.1f ms/step%s\n%-28s %8s %10s %7s\n", (long long)steps,
              step_seconds * 1e3, device_sync != nullptr ? " synchronised" : "", "kernel", "calls",
              "ms/step", "share");
  for (const auto& [name, k] : sorted(by_kernel)) {
    const double ms = k.seconds / steps * 1e3;
    kernels += k.seconds / steps;
    std::printf("%-28s %8lld %10.2f %6.1f%%\n", name.c_str(), (long long)(k.calls / steps), ms,
                100 * k.seconds / steps / step_seconds);
    std::printf("PROFILE kernel=%s calls=%lld ms=%.3f\n", name.c_str(),
                (long long)(k.calls / steps), ms);
  }
  std::printf("%-28s %8s %10.2f %6.1f%%\n", "(outside kernels)", "", (step_seconds - kernels) * 1e3,
              100 * (step_seconds - kernels) / step_seconds);
  std::printf("costliest calls by arguments (dtype[shape] ..., ms/step, calls/step):\n");
  int shown = 0;
  for (const auto& [detail, k] : sorted(Times())) {
    if (++shown > 15) break;
    std::printf("  %8.2f ms %5lld x  %s\n", k.seconds / steps * 1e3, (long long)(k.calls / steps),
                detail.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void InstallKernelProfile(engine::core::Device device, void (*sync)()) {
  static const bool wrapped = [&] {
    device_sync = sync;
    engine::backend::WrapKernels(device,
                                 {&BeforeKernel, &AfterKernel, /*detail=*/true, &profiling});
    return true;
  }();
  (void)wrapped;
}

void ProfileSteps(const char* what, int64_t steps, const std::function<void()>& step) {
  Times().clear();
  profiling = true;
  const auto t0 = Clock::now();
  for (int64_t s = 0; s < steps; ++s) step();
  if (device_sync != nullptr) device_sync();
  profiling = false;
  std::printf("\nprofile of %s:", what);
  PrintProfile(Seconds(t0, Clock::now()) / steps, steps);
}

}  // namespace ampd::bench
