#include "engine/core/half.h"

#include <atomic>
#include <cstring>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
// GCC 12's AVX-512 intrinsics fill unused operands from a self-initialised
// placeholder (`__m512 __Y = __Y;`), which -Wmaybe-uninitialized reports at -O1
// and above (seen under --config=asan). The warnings are placed on the
// header's lines, so silencing them across the include covers only GCC's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define AMPD_HALF_X86 1
#endif

namespace ampd::engine::core {
namespace {

// memcpy rather than a union or reinterpret_cast: the only type pun that is
// defined behaviour in C++17, and compilers turn it into a register move.
uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

constexpr uint32_t kF32AbsMask = 0x7FFFFFFF;
constexpr uint32_t kF32Inf = 0x7F800000;

// ---------------------------------------------------------------------------
// Portable bulk kernels: also the tails of the vector kernels, which keeps the
// vector loops free of masked memory accesses.

void F32ToF16Scalar(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F32ToF16Bits(in[i]);
}

void F16ToF32Scalar(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F16BitsToF32(in[i]);
}

void F32ToBF16Scalar(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F32ToBF16Bits(in[i]);
}

void BF16ToF32Scalar(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = BF16BitsToF32(in[i]);
}

using EncodeFn = void (*)(const float*, uint16_t*, size_t);
using DecodeFn = void (*)(const uint16_t*, float*, size_t);

#ifdef AMPD_HALF_X86

// The immediate rounding mode makes vcvtps2ph ignore MXCSR.RC, so a caller
// that changed the rounding mode still gets round-to-nearest-even.
constexpr int kRoundNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Each vector kernel below finishes its tail with the scalar loop and then
// clears the upper halves of the vector registers itself. GCC turns the
// scalar call into a tail jump without its usual vzeroupper, so callers
// (baseline SSE code: StoreBlock's callers, LayerNorm's rows) ran with the
// upper state dirty, and every SSE instruction after paid for it: a
// LayerNorm of 4096 x 256 rounding its rows into bf16 took 0.57 ms, not 0.27.
// half_test's LeavesTheUpperVectorStateClean checks it, in the -c opt build
// that tools/test also runs (the PIC and unoptimised builds make no such jump).

// ---- f16: F16C (8 lanes) ---------------------------------------------------

__attribute__((target("avx,f16c"))) void F32ToF16F16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRoundNearestEven);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  F32ToF16Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

__attribute__((target("avx,f16c"))) void F16ToF32F16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  F16ToF32Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

// ---- f16: AVX-512F (16 lanes; same instruction, wider) ---------------------

__attribute__((target("avx512f"))) void F32ToF16Avx512(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), kRoundNearestEven);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  F32ToF16Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

__attribute__((target("avx512f"))) void F16ToF32Avx512(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  F16ToF32Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

// ---- bf16: the scalar integer formula, vectorized ---------------------------
// Not vcvtneps2bf16 (AVX512_BF16): it flushes f32 denormals to zero, which
// the scalar path does not, and it is missing on many AVX-512 CPUs anyway.

__attribute__((target("avx2"))) void F32ToBF16Avx2(const float* in, uint16_t* out, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(kF32AbsMask);
  const __m256i inf = _mm256_set1_epi32(kF32Inf);
  const __m256i round_bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    // Signed compare is safe: both sides have the sign bit clear.
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i rounded = _mm256_add_epi32(x, _mm256_add_epi32(round_bias, lsb));
    const __m256i r =
        _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(x, quiet), is_nan), 16);
    // packus works per 128-bit half; the permute gathers both halves' results
    // into the low 128 bits in element order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  F32ToBF16Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

__attribute__((target("avx2"))) void BF16ToF32Avx2(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), x);
  }
  BF16ToF32Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

__attribute__((target("avx512f"))) void F32ToBF16Avx512(const float* in, uint16_t* out, size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(kF32AbsMask);
  const __m512i inf = _mm512_set1_epi32(kF32Inf);
  const __m512i round_bias = _mm512_set1_epi32(0x7FFF);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    const __m512i rounded = _mm512_add_epi32(x, _mm512_add_epi32(round_bias, lsb));
    const __m512i r =
        _mm512_srli_epi32(_mm512_mask_mov_epi32(rounded, is_nan, _mm512_or_si512(x, quiet)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
  F32ToBF16Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

__attribute__((target("avx512f"))) void BF16ToF32Avx512(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  BF16ToF32Scalar(in + i, out + i, n - i);
  _mm256_zeroupper();  // (see above)
}

#endif  // AMPD_HALF_X86

// ---------------------------------------------------------------------------
// Dispatch. Each format picks its best kernel at or below the cap. The CPU is
// asked once; the cap is read on every call so tests can flip it at will.

struct Kernels {
  EncodeFn encode;
  DecodeFn decode;
};

// Indexed by HalfIsaCap. Without x86 intrinsics DetectCpuTiers never leaves
// tier 0, so the repeated scalar entries there only fill the table.
#ifdef AMPD_HALF_X86
constexpr Kernels kF16Kernels[] = {{F32ToF16Scalar, F16ToF32Scalar},
                                   {F32ToF16F16c, F16ToF32F16c},
                                   {F32ToF16Avx512, F16ToF32Avx512}};
constexpr Kernels kBF16Kernels[] = {{F32ToBF16Scalar, BF16ToF32Scalar},
                                    {F32ToBF16Avx2, BF16ToF32Avx2},
                                    {F32ToBF16Avx512, BF16ToF32Avx512}};
#else
constexpr Kernels kF16Kernels[] = {{F32ToF16Scalar, F16ToF32Scalar},
                                   {F32ToF16Scalar, F16ToF32Scalar},
                                   {F32ToF16Scalar, F16ToF32Scalar}};
constexpr Kernels kBF16Kernels[] = {{F32ToBF16Scalar, BF16ToF32Scalar},
                                    {F32ToBF16Scalar, BF16ToF32Scalar},
                                    {F32ToBF16Scalar, BF16ToF32Scalar}};
#endif

// Best tier each format supports on this CPU, independent of the cap.
struct CpuTiers {
  int f16 = 0;
  int bf16 = 0;
};

CpuTiers DetectCpuTiers() {
  CpuTiers tiers;
#ifdef AMPD_HALF_X86
  // libgcc's answers include the OS check (XGETBV) for AVX and AVX-512 state.
  __builtin_cpu_init();
  constexpr int kAvx2 = static_cast<int>(HalfIsaCap::kAvx2);
  constexpr int kAvx512 = static_cast<int>(HalfIsaCap::kAvx512);
  if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) tiers.f16 = kAvx2;
  if (__builtin_cpu_supports("avx2")) tiers.bf16 = kAvx2;
  if (__builtin_cpu_supports("avx512f")) tiers.f16 = tiers.bf16 = kAvx512;
#endif
  return tiers;
}

const CpuTiers& Tiers() {
  static const CpuTiers tiers = DetectCpuTiers();
  return tiers;
}

std::atomic<int> g_cap{static_cast<int>(HalfIsaCap::kAvx512)};

int F16Tier() {
  const int cap = g_cap.load(std::memory_order_relaxed);
  return cap < Tiers().f16 ? cap : Tiers().f16;
}

int BF16Tier() {
  const int cap = g_cap.load(std::memory_order_relaxed);
  return cap < Tiers().bf16 ? cap : Tiers().bf16;
}

const Kernels& F16Kernels() { return kF16Kernels[F16Tier()]; }
const Kernels& BF16Kernels() { return kBF16Kernels[BF16Tier()]; }

// A fixed stack buffer keeps the in-place round trips allocation-free while
// still going through the bulk (vector) kernels.
constexpr size_t kRoundTripChunk = 512;

}  // namespace

// ---------------------------------------------------------------------------
// Scalar conversions: integer arithmetic only, so the result never depends on
// the FPU's rounding mode or flush-to-zero settings.

uint16_t F32ToF16Bits(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) {
    return static_cast<uint16_t>(sign | 0x7E00 | (abs >> 13 & 0x03FF));
  }
  // 65520 (0x477FF000) is halfway between 65504, the largest f16, and 65536;
  // the tie goes to the even neighbour, which is Inf's encoding.
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);
  if (abs >= 0x38800000) {  // >= 2^-14: a normal f16.
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits;
    // a carry out of the mantissa correctly bumps the exponent.
    const uint32_t rebased = abs - ((127 - 15) << 23);
    const uint32_t rounded = rebased + 0x0FFF + ((rebased >> 13) & 1);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // f16 subnormal (or zero): the result is |value| / 2^-24 rounded to an
  // integer. With the implicit bit, |value| = mantissa * 2^(exponent - 150),
  // so that integer is mantissa >> (126 - exponent) plus rounding.
  const uint32_t exponent = abs >> 23;
  const uint32_t shift = 126 - exponent;  // >= 14 here.
  // mantissa < 2^24, so from a shift of 25 on it is below half an f16 ulp;
  // this also catches f32 zeros and subnormals (exponent 0).
  if (shift >= 25) return sign;
  const uint32_t mantissa = (abs & 0x007FFFFF) | 0x00800000;
  const uint32_t half = 1u << (shift - 1);
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  uint32_t result = mantissa >> shift;
  if (remainder > half || (remainder == half && (result & 1))) ++result;
  // result may reach 0x400: the smallest normal, which is also its encoding.
  return static_cast<uint16_t>(sign | result);
}

float F16BitsToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x03FF;
  if (exponent == 0x1F) {
    if (mantissa == 0) return BitsFloat(sign | kF32Inf);
    return BitsFloat(sign | 0x7FC00000 | (mantissa << 13));  // Quieted, as vcvtph2ps does.
  }
  if (exponent != 0) return BitsFloat(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
  if (mantissa == 0) return BitsFloat(sign);
  // Subnormal f16 -> normal f32: shift the leading 1 up into the implicit
  // position and lower the exponent by the same amount.
  const int leading = 31 - __builtin_clz(mantissa);  // bit index of the leading 1, 0..9.
  const uint32_t f32_exponent = static_cast<uint32_t>(leading + 127 - 24);
  const uint32_t f32_mantissa = (mantissa << (23 - leading)) & 0x007FFFFF;
  return BitsFloat(sign | (f32_exponent << 23) | f32_mantissa);
}

uint16_t F32ToBF16Bits(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & kF32AbsMask) > kF32Inf) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // bf16 is the top half of an f32, so rounding the low 16 bits as an integer
  // is RNE for every finite input, subnormals included; the largest finite
  // values carry into the exponent and become Inf, as they should.
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

float BF16BitsToF32(uint16_t bits) { return BitsFloat(static_cast<uint32_t>(bits) << 16); }

void ConvertF32ToF16(const float* in, uint16_t* out, size_t n) { F16Kernels().encode(in, out, n); }

void ConvertF16ToF32(const uint16_t* in, float* out, size_t n) { F16Kernels().decode(in, out, n); }

void ConvertF32ToBF16(const float* in, uint16_t* out, size_t n) {
  BF16Kernels().encode(in, out, n);
}

void ConvertBF16ToF32(const uint16_t* in, float* out, size_t n) {
  BF16Kernels().decode(in, out, n);
}

void RoundTripF16(float* values, size_t n) {
  const Kernels& kernels = F16Kernels();
  uint16_t buffer[kRoundTripChunk];
  for (size_t i = 0; i < n; i += kRoundTripChunk) {
    const size_t m = n - i < kRoundTripChunk ? n - i : kRoundTripChunk;
    kernels.encode(values + i, buffer, m);
    kernels.decode(buffer, values + i, m);
  }
}

void RoundTripBF16(float* values, size_t n) {
  const Kernels& kernels = BF16Kernels();
  uint16_t buffer[kRoundTripChunk];
  for (size_t i = 0; i < n; i += kRoundTripChunk) {
    const size_t m = n - i < kRoundTripChunk ? n - i : kRoundTripChunk;
    kernels.encode(values + i, buffer, m);
    kernels.decode(buffer, values + i, m);
  }
}

const char* HalfConversionPath() {
  // Static strings, so callers may keep the pointer. [f16 tier][bf16 tier].
  static constexpr const char* kNames[3][3] = {
      {"scalar", "f16:scalar bf16:avx2", "f16:scalar bf16:avx512"},
      {"f16:f16c bf16:scalar", "f16:f16c bf16:avx2", "f16:f16c bf16:avx512"},
      {"f16:avx512 bf16:scalar", "f16:avx512 bf16:avx2", "f16:avx512 bf16:avx512"},
  };
  return kNames[F16Tier()][BF16Tier()];
}

void ForceScalarHalfConversions(bool force) {
  CapHalfConversionIsa(force ? HalfIsaCap::kScalar : HalfIsaCap::kAvx512);
}

void CapHalfConversionIsa(HalfIsaCap cap) {
  g_cap.store(static_cast<int>(cap), std::memory_order_relaxed);
}

}  // namespace ampd::engine::core
