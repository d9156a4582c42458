#ifndef AMPD_ENGINE_CPU_PEAK_FLOPS_H_
#define AMPD_ENGINE_CPU_PEAK_FLOPS_H_

// The CPU's bf16 GEMM rate: what MFU is measured against on the host, since
// no data sheet says what oneDNN reaches on this machine with these cores.

namespace ampd::engine::cpu {

// FLOP/s of a square bf16 GEMM (f32 accumulation) on the CPU backend's
// matmul kernel, the best of a few repetitions after a warm-up: about a
// tenth of a second, once per process (later calls return the first
// measurement). The server measures it at start-up.
double MeasuredBf16GemmFlops();

// One measurement of an n x n x n bf16 GEMM, repeated `repeats` times
// (tests use small sizes).
double MeasureBf16GemmFlops(int n, int repeats);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_PEAK_FLOPS_H_
