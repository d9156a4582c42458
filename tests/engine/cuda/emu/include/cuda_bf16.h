#ifndef AMPD_TESTS_CUDA_EMU_CUDA_BF16_H_
#define AMPD_TESTS_CUDA_EMU_CUDA_BF16_H_

// __nv_bfloat16 for the CPU emulator (see cuda_fp16.h).

#include <cstdint>

#include "engine/core/half.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 h) { return ampd::engine::core::BF16BitsToF32(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __nv_bfloat16{ampd::engine::core::F32ToBF16Bits(f)};
}

#endif  // AMPD_TESTS_CUDA_EMU_CUDA_BF16_H_
