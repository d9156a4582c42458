#ifndef AMPD_ENGINE_CPU_BF16_GEMM_ROUTE_H_
#define AMPD_ENGINE_CPU_BF16_GEMM_ROUTE_H_

// How the CPU backend multiplies bf16 matrices (Matmul, Linear, the bf16
// attention backward's GEMMs, convolutions): on oneDNN's bf16 matmul, or
// widened to f32 (exact) and multiplied by oneDNN's f32 matmul. Both
// accumulate exact products in f32, as torch.autocast's bf16 matmul does;
// only the order of the sums differs, so the result can differ in its last
// bit. Where the native one is slower, widening is the faster way to the
// same numbers: on an Intel Xeon whose AVX512-BF16 dot products issue at
// the f32 FMA rate (AMX off), oneDNN's bf16 matmul ran at 166 GFLOP/s
// against its f32 matmul's 290 (bench/README.md, engine_bench).
//
// The route is fixed per machine, not timed, so a run and its resume on the
// same machine compute the same bits whatever else the machine is doing
// (timings taken while other work ran picked either route): widened where
// oneDNN has no bf16 matmul (no AVX-512) and on Intel cores with AVX512-BF16
// and AVX512-FP16 whose AMX is off (the Xeon above); native everywhere else
// (AMX, AMD's Zen 4 and 5, where bf16 is the faster). gpt_bench's
// `bf16-mixed:native` row and engine_bench's GEMM table compare the two.
// AMPD_CPU_BF16_GEMM=native|widened overrides the choice.

#include <string>

namespace ampd::engine::cpu {

enum class Bf16GemmRoute { kNative, kWidened };

struct Bf16GemmChoice {
  Bf16GemmRoute route = Bf16GemmRoute::kNative;
  std::string why;  // one sentence for the capabilities' notes and logs
};

// The route in effect: a test's override if set, else the machine's.
Bf16GemmRoute Bf16GemmRouteInEffect();
const Bf16GemmChoice& ChosenBf16GemmRoute();

// For tests and benchmarks: force a route (kDefault: the process's choice
// again).
enum class Bf16GemmOverride { kDefault, kNative, kWidened };
void SetBf16GemmRouteForTesting(Bf16GemmOverride route);

// The rule itself, for tests: `onednn_bf16` oneDNN has a bf16 matmul here;
// the CPU's vendor and features, `amx` oneDNN runs on AMX tiles.
Bf16GemmRoute DecideBf16GemmRoute(bool onednn_bf16, bool intel, bool avx512_bf16, bool avx512_fp16,
                                  bool amx);

const char* Bf16GemmRouteName(Bf16GemmRoute route);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_BF16_GEMM_ROUTE_H_
