#ifndef AMPD_ENGINE_CPU_DROPOUT_MASK_H_
#define AMPD_ENGINE_CPU_DROPOUT_MASK_H_

// Dropout's mask (backend::DropoutHash, DropoutKeep) 16 indices at a time
// with AVX-512 DQ (64-bit multiplies, 8 lanes), for the CPU backend's
// dropout and attention kernels: the same bits as the scalar rule. Internal
// to engine/cpu.

#include <cstdint>

#include "engine/cpu/avx512_math.h"

namespace ampd::engine::cpu {

// Whether DropoutKeep16 may run here (AVX-512 kernels on, and DQ).
bool UseAvx512DropoutMask();

#ifdef AMPD_HAS_AVX512_KERNELS
#define AMPD_AVX512_DQ __attribute__((target("avx512f,avx512dq")))

// DropoutHash(seed, first + l) in lane l of 8.
AMPD_AVX512_DQ inline __m512i DropoutHash8(uint64_t seed, uint64_t first) {
  const __m512i index1 = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(first + 1)),
                                          _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  __m512i z = _mm512_add_epi64(
      _mm512_set1_epi64(static_cast<int64_t>(seed)),
      _mm512_mullo_epi64(index1, _mm512_set1_epi64(static_cast<int64_t>(0x9E3779B97F4A7C15ull))));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                         _mm512_set1_epi64(static_cast<int64_t>(0xBF58476D1CE4E5B9ull)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(static_cast<int64_t>(0x94D049BB133111EBull)));
  return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

// Bit l set iff index first + l is kept: DropoutHash >> 11 >= threshold
// (backend::DropoutThreshold(p), DropoutKeep's rule in integers).
AMPD_AVX512_DQ inline __mmask16 DropoutKeep16(uint64_t seed, uint64_t first, __m512i threshold) {
  const __mmask8 lo =
      _mm512_cmpge_epu64_mask(_mm512_srli_epi64(DropoutHash8(seed, first), 11), threshold);
  const __mmask8 hi =
      _mm512_cmpge_epu64_mask(_mm512_srli_epi64(DropoutHash8(seed, first + 8), 11), threshold);
  return static_cast<__mmask16>(lo | (hi << 8));
}

// x[i] for i in [0, n): kept (index first + i) times keep_scale, else 0, into y
// (which may be x).
AMPD_AVX512_DQ inline void DropoutRow16(uint64_t seed, uint64_t first, uint64_t threshold,
                                        float keep_scale, const float* x, float* y, int64_t n) {
  const __m512i t = _mm512_set1_epi64(static_cast<int64_t>(threshold));
  const __m512 scale = _mm512_set1_ps(keep_scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
    _mm512_mask_storeu_ps(y + i, lanes,
                          _mm512_maskz_mul_ps(DropoutKeep16(seed, first + i, t), v, scale));
  }
}
#endif  // AMPD_HAS_AVX512_KERNELS

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_DROPOUT_MASK_H_
