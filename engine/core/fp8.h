#ifndef AMPD_ENGINE_CORE_FP8_H_
#define AMPD_ENGINE_CORE_FP8_H_

// The two 8-bit floating-point formats of FP8 training (OCP FP8, as
// Transformer Engine, cuBLASLt and PyTorch's float8_e4m3fn / float8_e5m2):
//  - E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; the
//    one NaN pattern is S.1111.111 (0x7F / 0xFF). Largest finite: 448.
//    Smallest subnormal: 2^-9.
//  - E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like:
//    S.11111.00 is +-Inf, S.11111.xx (xx != 0) NaN. Largest finite: 57344.
//    Smallest subnormal: 2^-16.
// F32ToFp8 rounds to nearest, ties to even, with subnormals. A value beyond
// the format's range after rounding becomes +-max when `saturate` (the cast
// before an FP8 GEMM, as TE does it), else NaN (E4M3: it has no Inf) or +-Inf
// (E5M2), as PyTorch's .to(float8_*) does. +-Inf saturates the same way.
// NaN stays NaN, sign kept (E4M3: S.1111.111; E5M2: S.11111.10). bf16 and
// f16 inputs convert exactly to f32 first, so they round once.
//
// Header-only and free of the standard library's math, so the CUDA kernels
// use the very same code (bit for bit with the CPU).

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define AMPD_FP8_HD __host__ __device__
#else
#define AMPD_FP8_HD
#endif

namespace ampd::engine::core {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;

AMPD_FP8_HD constexpr float Fp8Max(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? kE4M3Max : kE5M2Max;
}
inline const char* Fp8FormatName(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

namespace fp8_detail {

AMPD_FP8_HD inline uint32_t Bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
AMPD_FP8_HD inline float FromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

}  // namespace fp8_detail

AMPD_FP8_HD inline uint8_t F32ToFp8(float x, Fp8Format f, bool saturate) {
  const bool e4m3 = f == Fp8Format::kE4M3;
  const int mant_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const uint32_t max_code = e4m3 ? 0x7E : 0x7B;
  const uint32_t overflow_code = e4m3 ? 0x7F : 0x7C;  // NaN / Inf
  const uint32_t u = fp8_detail::Bits(x);
  const uint32_t sign = (u >> 24) & 0x80;
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) return static_cast<uint8_t>(sign | (e4m3 ? 0x7F : 0x7E));  // NaN
  if (a == 0x7F800000) return static_cast<uint8_t>(sign | (saturate ? max_code : overflow_code));
  uint32_t code;
  const uint32_t min_normal = static_cast<uint32_t>(127 + 1 - bias) << 23;  // as f32 bits
  if (a < min_normal) {
    // A subnormal of the format (or zero): the value in units of the
    // smallest subnormal, 2^(1 - bias - mant_bits), rounded to an integer.
    const int e = static_cast<int>(a >> 23);
    const int shift = 150 + 1 - bias - mant_bits - e;  // of the 24-bit significand
    if (e == 0 || shift >= 25) {
      code = 0;  // below half the smallest subnormal (f32 subnormals included)
    } else {
      const uint32_t significand = (a & 0x7FFFFF) | 0x800000;
      code = significand >> shift;
      const uint32_t rest = significand & ((1u << shift) - 1);
      const uint32_t half = 1u << (shift - 1);
      if (rest > half || (rest == half && (code & 1))) ++code;  // may reach the min normal
    }
  } else {
    // Normal: rebias the exponent, round the mantissa from 23 bits (a carry
    // moves into the exponent, as it should).
    const int shift = 23 - mant_bits;
    uint32_t t = a - (static_cast<uint32_t>(127 - bias) << 23);
    t += (1u << (shift - 1)) - 1 + ((t >> shift) & 1);
    code = t >> shift;
  }
  if (code > max_code) code = saturate ? max_code : overflow_code;
  return static_cast<uint8_t>(sign | code);
}

AMPD_FP8_HD inline float Fp8ToF32(uint8_t b, Fp8Format f) {
  const bool e4m3 = f == Fp8Format::kE4M3;
  const int mant_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const uint32_t sign = static_cast<uint32_t>(b & 0x80) << 24;
  const uint32_t exp = (b & 0x7F) >> mant_bits;
  const uint32_t mant = b & ((1u << mant_bits) - 1);
  if (e4m3 && (b & 0x7F) == 0x7F) return fp8_detail::FromBits(sign | 0x7FC00000);
  if (!e4m3 && exp == 31) return fp8_detail::FromBits(sign | (mant == 0 ? 0x7F800000 : 0x7FC00000));
  if (exp == 0) {
    // mant x 2^(1 - bias - mant_bits): exact in f32 (a power-of-two scale).
    const float unit =
        fp8_detail::FromBits(static_cast<uint32_t>(127 + 1 - bias - mant_bits) << 23);
    return fp8_detail::FromBits(sign | fp8_detail::Bits(static_cast<float>(mant) * unit));
  }
  return fp8_detail::FromBits(sign | ((exp - bias + 127) << 23) | (mant << (23 - mant_bits)));
}

// How a delayed-scaling update picks its amax from a tensor's history
// (backend/fp8_scaling.h): the largest entry, or this step's.
enum class AmaxAlgo : uint8_t { kMax, kMostRecent };

// The scale for a tensor whose amax is `amax` (Transformer Engine's rule):
// scaled_max / amax, where scaled_max = fp8_max * 2^-margin; `previous` when
// amax is 0 or not finite; FP32_MAX when the quotient overflows (a tiny
// amax). Comparisons only, so host and device agree bit for bit.
AMPD_FP8_HD inline float Fp8ScaleFromAmax(float amax, float scaled_max, float previous) {
  constexpr float kF32Max = 3.40282347e+38f;
  if (!(amax > 0.0f && amax <= kF32Max)) return previous;  // 0, negative, Inf or NaN
  const float scale = scaled_max / amax;
  return scale > kF32Max ? kF32Max : scale;
}

// The once-per-step delayed-scaling update of one tensor (Transformer
// Engine's): `history` holds `len` amaxes `stride` floats apart, [0] this
// step's. The amax is the largest entry (kMax; NaNs passed over, as fmaxf)
// or [0] (kMostRecent); the history rolls so that [0] is free for the next
// step, this step's amax becomes the newest and the oldest drops out; then
// the scale and its inverse. The host and the CUDA kernel both run this.
AMPD_FP8_HD inline void Fp8UpdateScalingColumn(float* history, int64_t len, int64_t stride,
                                               AmaxAlgo algo, float scaled_max, float* scale,
                                               float* scale_inv) {
  const float current = history[0];
  float amax = current;
  if (algo == AmaxAlgo::kMax) {
    for (int64_t i = 1; i < len; ++i) {
      const float h = history[i * stride];
      amax = amax != amax ? h : (h > amax ? h : amax);  // fmaxf
    }
  }
  for (int64_t i = 1; i < len - 1; ++i) history[i * stride] = history[(i + 1) * stride];
  if (len > 1) history[(len - 1) * stride] = current;
  history[0] = 0.0f;
  *scale = Fp8ScaleFromAmax(amax, scaled_max, *scale);
  *scale_inv = 1.0f / *scale;
}

}  // namespace ampd::engine::core

#endif  // AMPD_ENGINE_CORE_FP8_H_
