#ifndef AMPD_ENGINE_CPU_AVX512_MATH_H_
#define AMPD_ENGINE_CPU_AVX512_MATH_H_

// Vector math for the CPU backend's AVX-512 kernels. Include only from .cc
// files whose callers are marked AMPD_AVX512 and are reached after
// UseAvx512Kernels() (engine/cpu/vector_isa.h): the engine itself is built
// for plain x86-64.

#if defined(__x86_64__) && defined(__GNUC__)
#include <cstdint>

// As in core/half.cc: GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized
// on their own placeholders; silenced across the include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#define AMPD_AVX512 __attribute__((target("avx512f")))
#define AMPD_HAS_AVX512_KERNELS 1

namespace ampd::engine::cpu {

// e^x of 16 floats: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial
// for e^r (Cephes' expf coefficients) and 2^n applied by vscalefps, which
// also gives +inf above ln(FLT_MAX) and 0 far below the denormals. Within
// 2 ulp of libm's expf over the normal range; NaN stays NaN (max/min below
// return their second operand, x, when it is NaN), -inf gives 0, +inf gives
// +inf.
AMPD_AVX512 inline __m512 Exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// Exp16 of the lanes in `valid`, 0 in the others (masked-out scores).
AMPD_AVX512 inline __m512 MaskedExp16(__mmask16 valid, __m512 x) {
  return _mm512_maskz_mov_ps(valid, Exp16(x));
}

// 16 f32 or bf16 values as floats (bf16 -> f32 is exact: the bits << 16).
template <bool kBf16>
AMPD_AVX512 inline __m512 Load16(const void* p) {
  if constexpr (kBf16) {
    const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(p));
  }
}

// The first min(n, 16) lanes.
AMPD_AVX512 inline __mmask16 FirstLanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

}  // namespace ampd::engine::cpu

#endif  // __x86_64__

#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

// Whether a kernel with AVX-512 rows takes them: built into this binary
// (x86-64 with GCC) and UseAvx512Kernels() now; else its portable rows.
inline bool UseAvx512Rows() {
#ifdef AMPD_HAS_AVX512_KERNELS
  return UseAvx512Kernels();
#else
  return false;
#endif
}

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_AVX512_MATH_H_
