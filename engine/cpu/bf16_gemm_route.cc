#include "engine/cpu/bf16_gemm_route.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "engine/cpu/capabilities.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ampd::engine::cpu {
namespace {

std::atomic<Bf16GemmOverride> g_override{Bf16GemmOverride::kDefault};

Bf16GemmChoice Choose() {
  Bf16GemmChoice c;
  const CpuCapabilities& cpu = ProbeCpu();
  const char* env = std::getenv("AMPD_CPU_BF16_GEMM");
  const bool forced_native = env != nullptr && std::strcmp(env, "native") == 0 && cpu.bf16_matmul;
  if (forced_native || (env != nullptr && std::strcmp(env, "widened") == 0)) {
    c.route = forced_native ? Bf16GemmRoute::kNative : Bf16GemmRoute::kWidened;
    c.why = absl::StrFormat("bf16 GEMMs %s (AMPD_CPU_BF16_GEMM=%s).",
                            forced_native ? "run on oneDNN's bf16 matmul"
                                          : "are widened to f32 (exact), then f32 GEMMs",
                            env);
    return c;
  }
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  const bool on_amx = (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
  __builtin_cpu_init();
  const bool intel = __builtin_cpu_is("intel");
  // AVX512-FP16 from CPUID (leaf 7, EDX bit 23): clang's
  // __builtin_cpu_supports does not know the feature.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool fp16 = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && ((edx >> 23) & 1) != 0;
  c.route = DecideBf16GemmRoute(cpu.bf16_matmul, intel, cpu.avx512_bf16, fp16, on_amx);
  if (!cpu.bf16_matmul) {
    c.why =
        "bf16 GEMMs are widened to f32 (exact), then f32 GEMMs: oneDNN 2.6 has no bf16 "
        "matmul without AVX-512, so bf16 saves memory here, not time.";
  } else if (c.route == Bf16GemmRoute::kWidened) {
    c.why =
        "bf16 GEMMs are widened to f32 (exact), then f32 GEMMs: on this Intel core with "
        "AMX off, oneDNN's bf16 matmul runs at about 0.6x its f32 matmul's rate.";
  } else {
    c.why = on_amx ? "bf16 GEMMs run on oneDNN's bf16 matmul (AMX)."
                   : "bf16 GEMMs run on oneDNN's bf16 matmul.";
  }
  if (env != nullptr && !forced_native) {  // "native" without a bf16 matmul, or a typo
    c.why += absl::StrFormat(
        " (AMPD_CPU_BF16_GEMM=%s ignored: %s)", env,
        std::strcmp(env, "native") == 0 ? "no oneDNN bf16 matmul here" : "not native or widened");
  }
  return c;
}

}  // namespace

Bf16GemmRoute DecideBf16GemmRoute(bool onednn_bf16, bool intel, bool avx512_bf16, bool avx512_fp16,
                                  bool amx) {
  if (!onednn_bf16) return Bf16GemmRoute::kWidened;
  // A Sapphire Rapids-class core (AVX512-FP16) whose AMX is off: its bf16
  // dot products issue at the f32 FMAs' rate, and oneDNN's bf16 kernels add
  // their reorders on top.
  if (intel && avx512_bf16 && avx512_fp16 && !amx) return Bf16GemmRoute::kWidened;
  return Bf16GemmRoute::kNative;
}

const Bf16GemmChoice& ChosenBf16GemmRoute() {
  static const Bf16GemmChoice* choice = new Bf16GemmChoice(Choose());
  return *choice;
}

Bf16GemmRoute Bf16GemmRouteInEffect() {
  switch (g_override.load(std::memory_order_relaxed)) {
    case Bf16GemmOverride::kNative:
      return ProbeCpu().bf16_matmul ? Bf16GemmRoute::kNative : Bf16GemmRoute::kWidened;
    case Bf16GemmOverride::kWidened:
      return Bf16GemmRoute::kWidened;
    case Bf16GemmOverride::kDefault:
      break;
  }
  return ChosenBf16GemmRoute().route;
}

void SetBf16GemmRouteForTesting(Bf16GemmOverride route) { g_override.store(route); }

const char* Bf16GemmRouteName(Bf16GemmRoute route) {
  return route == Bf16GemmRoute::kNative ? "native" : "widened";
}

}  // namespace ampd::engine::cpu
