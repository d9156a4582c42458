#ifndef AMPD_ENGINE_CPU_PEAK_FLOPS_H_
#define AMPD_ENGINE_CPU_PEAK_FLOPS_H_

// The CPU's bf16 GEMM rate: what MFU is measured against on the host, since
// no data sheet says what oneDNN reaches on this machine with these cores.

namespace ampd::engine::cpu {

// FLOP/s of a square bf16 GEMM (f32 accumulation) on the CPU backend's
// matmul kernel, the best of its repetitions over 0.3 s: once per process
// (later calls return the first measurement). The server measures it at
// start-up.
double MeasuredBf16GemmFlops();

// The best rate of an n x n x n bf16 GEMM over at least `min_repeats`
// repetitions and `min_seconds` (tests use small sizes). Why a duration: at
// a server's start-up the first repetitions ran at a third of the steady
// rate for about 0.1 s (Zen 4, 2 cores: 135 against 400-445 GFLOP/s), so the
// best of five reported a third of the peak in two starts of three, and MFU
// three times what it was.
double MeasureBf16GemmFlops(int n, int min_repeats, double min_seconds = 0);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_PEAK_FLOPS_H_
