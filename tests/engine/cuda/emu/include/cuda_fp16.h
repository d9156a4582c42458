#ifndef AMPD_TESTS_CUDA_EMU_CUDA_FP16_H_
#define AMPD_TESTS_CUDA_EMU_CUDA_FP16_H_

// __half for the CPU emulator: storage and the two conversions the kernels
// uses, round-to-nearest-even like the device intrinsics.

#include <cstdint>

#include "engine/core/half.h"

struct __half {
  uint16_t bits;
};
inline float __half2float(__half h) { return ampd::engine::core::F16BitsToF32(h.bits); }
inline __half __float2half_rn(float f) { return __half{ampd::engine::core::F32ToF16Bits(f)}; }

#endif  // AMPD_TESTS_CUDA_EMU_CUDA_FP16_H_
