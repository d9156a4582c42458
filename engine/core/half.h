#ifndef AMPD_ENGINE_CORE_HALF_H_
#define AMPD_ENGINE_CORE_HALF_H_

// IEEE binary16 and bfloat16 conversions, round-to-nearest-even.
// Semantics (shared by the scalar and every fast path, bit for bit):
//  - finite values round to nearest, ties to even; too large -> +-Inf;
//  - f16 subnormals are produced and read exactly;
//  - Inf stays Inf; NaN stays NaN (quiet bit set, sign and top payload bits kept).
// NaN bit patterns, exactly (the F16C instructions do the same, so the scalar
// path is defined to match them):
//  - f32 -> f16:  sign | 0x7E00 | (f32 mantissa >> 13);
//  - f16 -> f32:  sign | 0x7FC00000 | (f16 mantissa << 13), i.e. a signaling
//    f16 NaN comes back quiet (vcvtph2ps quiets it);
//  - f32 -> bf16: (f32 bits >> 16) | 0x0040;
//  - bf16 -> f32: bf16 bits << 16, exact, so a signaling NaN stays signaling.
// None of the paths depends on MXCSR (rounding mode, FTZ, DAZ).

#include <cstddef>
#include <cstdint>

namespace ampd::engine::core {

uint16_t F32ToF16Bits(float value);
float F16BitsToF32(uint16_t bits);
uint16_t F32ToBF16Bits(float value);
float BF16BitsToF32(uint16_t bits);

// Bulk conversions; pick F16C / AVX-512 paths at run time when the CPU has them.
void ConvertF32ToF16(const float* in, uint16_t* out, size_t n);
void ConvertF16ToF32(const uint16_t* in, float* out, size_t n);
void ConvertF32ToBF16(const float* in, uint16_t* out, size_t n);
void ConvertBF16ToF32(const uint16_t* in, float* out, size_t n);

// Rounds each value to the nearest f16 / bf16 and back to f32, in place.
void RoundTripF16(float* values, size_t n);
void RoundTripBF16(float* values, size_t n);

// For tests and benchmarks: which bulk path is in use, and a way to force the
// portable scalar path (so both can be compared on the same machine).
const char* HalfConversionPath();  // e.g. "f16:f16c bf16:avx512" or "scalar"
void ForceScalarHalfConversions(bool force);

// For tests: caps the run-time choice at an instruction-set tier so that every
// path this CPU supports, not only the best one, can be compared with the
// scalar path. kAvx2 is F16C for f16 and AVX2 for bf16. The cap replaces any
// earlier cap or ForceScalarHalfConversions call: ForceScalarHalfConversions(true)
// is a cap of kScalar, ForceScalarHalfConversions(false) a cap of kAvx512 (none).
enum class HalfIsaCap { kScalar, kAvx2, kAvx512 };
void CapHalfConversionIsa(HalfIsaCap cap);

}  // namespace ampd::engine::core

#endif  // AMPD_ENGINE_CORE_HALF_H_
