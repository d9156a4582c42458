// Kept apart from the backend so that builds without CUDA (which report no
// devices) and the emulator share one table.
#include <string>

#include "engine/cuda/cuda_backend.h"

namespace ampd::engine::cuda {

double DataSheetBf16Flops(const std::string& name) {
  // Dense (no sparsity) bf16 tensor-core rates of the SXM parts, from the
  // vendor's data sheets; PCIe parts run lower clocks, so they are matched
  // first. Unknown GPUs get 0 and report no MFU rather than a guess.
  struct Row {
    const char* substring;
    double flops;
  };
  static constexpr Row kRows[] = {
      {"H100 PCIe", 756e12}, {"H100", 989e12}, {"H200", 989e12}, {"H800", 989e12},
      {"B200", 2250e12},     {"A100", 312e12}, {"A800", 312e12}, {"L40S", 362e12},
      {"A10", 125e12},       {"L4", 121e12},
  };
  for (const Row& r : kRows) {
    if (name.find(r.substring) != std::string::npos) return r.flops;
  }
  return 0;
}

}  // namespace ampd::engine::cuda
