#ifndef AMPD_ENGINE_CPU_VECTOR_ISA_H_
#define AMPD_ENGINE_CPU_VECTOR_ISA_H_

// Which hand-vectorised kernels of the CPU backend may run. The engine is
// built for plain x86-64, so kernels written for AVX-512 (attention, GELU;
// engine/cpu/avx512_math.h) are chosen at run time on CPUs that have it, and
// every one keeps its portable loop, which tests also run by capping the ISA.

namespace ampd::engine::cpu {

// True when this CPU (and its OS) supports AVX-512F and no cap forbids it.
bool UseAvx512Kernels();

// Tests: false makes every kernel take its portable path; true restores
// the CPU's own answer.
void AllowAvx512Kernels(bool allow);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_VECTOR_ISA_H_
