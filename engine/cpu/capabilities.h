#ifndef AMPD_ENGINE_CPU_CAPABILITIES_H_
#define AMPD_ENGINE_CPU_CAPABILITIES_H_

// What this machine's CPU can do for each precision, probed once.

#include <string>

namespace ampd::engine::cpu {

struct CpuCapabilities {
  std::string name;  // /proc/cpuinfo's model name
  int threads = 0;
  bool avx512_bf16 = false;  // native bf16 dot products
  bool f16c = false;         // hardware f16 <-> f32 conversion
  // oneDNN runs bf16 matmul here (natively or emulated); without it (a CPU
  // with no AVX-512) the engine widens bf16 operands to f32 (cpu/matmul.cc).
  bool bf16_matmul = false;
};

const CpuCapabilities& ProbeCpu();

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_CAPABILITIES_H_
