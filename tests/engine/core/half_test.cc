#include "engine/core/half.h"

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ampd::engine {

using core::BF16BitsToF32;
using core::CapHalfConversionIsa;
using core::ConvertBF16ToF32;
using core::ConvertF16ToF32;
using core::ConvertF32ToBF16;
using core::ConvertF32ToF16;
using core::F16BitsToF32;
using core::F32ToBF16Bits;
using core::F32ToF16Bits;
using core::ForceScalarHalfConversions;
using core::HalfConversionPath;
using core::HalfIsaCap;
using core::RoundTripBF16;
using core::RoundTripF16;

namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// ---------------------------------------------------------------------------
// Reference: the textbook definition of each format, evaluated in double
// arithmetic (exact for everything here: f32 values times powers of two), with
// std::nearbyint doing the round-to-nearest-even. It shares no code or bit
// tricks with engine/core/half.cc, so the two can only agree by both being right.

struct Format {
  int mantissa_bits;
  int exponent_bits;
  int Bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int MaxExponentField() const { return (1 << exponent_bits) - 1; }
  uint16_t SignBit() const { return static_cast<uint16_t>(1u << (mantissa_bits + exponent_bits)); }
  uint16_t InfBits() const { return static_cast<uint16_t>(MaxExponentField() << mantissa_bits); }
};

constexpr Format kF16 = {10, 5};
constexpr Format kBF16 = {7, 8};

bool RefIsNan(uint16_t bits, Format format) {
  const int exponent = (bits >> format.mantissa_bits) & format.MaxExponentField();
  const int mantissa = bits & ((1 << format.mantissa_bits) - 1);
  return exponent == format.MaxExponentField() && mantissa != 0;
}

// Value of a non-NaN pattern.
double RefDecode(uint16_t bits, Format format) {
  const bool negative = (bits & format.SignBit()) != 0;
  const int exponent = (bits >> format.mantissa_bits) & format.MaxExponentField();
  const int mantissa = bits & ((1 << format.mantissa_bits) - 1);
  double magnitude;
  if (exponent == format.MaxExponentField()) {
    magnitude = std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, 1 - format.Bias() - format.mantissa_bits);
  } else {
    magnitude = std::ldexp((1 << format.mantissa_bits) + mantissa,
                           exponent - format.Bias() - format.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// Nearest representable value, ties to even, for a non-NaN input.
uint16_t RefEncode(float value, Format format) {
  const uint16_t sign = std::signbit(value) ? format.SignBit() : 0;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (std::isinf(magnitude)) return sign | format.InfBits();
  const int min_exponent = 1 - format.Bias();
  const int one = 1 << format.mantissa_bits;  // the implicit bit, as an integer significand.
  if (magnitude < std::ldexp(1.0, min_exponent)) {
    // Subnormal range: a multiple of the smallest subnormal. Rounding up to
    // `one` lands on the smallest normal, whose encoding is the same integer.
    const double units = std::nearbyint(std::ldexp(magnitude, format.mantissa_bits - min_exponent));
    return static_cast<uint16_t>(sign | static_cast<int>(units));
  }
  int frexp_exponent;
  std::frexp(magnitude, &frexp_exponent);
  int exponent = frexp_exponent - 1;  // magnitude in [2^exponent, 2^(exponent + 1)).
  double significand = std::nearbyint(std::ldexp(magnitude, format.mantissa_bits - exponent));
  if (significand == 2.0 * one) {  // rounded up to the next power of two.
    significand = one;
    ++exponent;
  }
  if (exponent > format.Bias()) return sign | format.InfBits();
  return static_cast<uint16_t>(sign | ((exponent + format.Bias()) << format.mantissa_bits) |
                               (static_cast<int>(significand) - one));
}

// NaN results are fixed by the contract in half.h rather than by arithmetic.
uint16_t SpecNanToF16(uint32_t f32_bits) {
  return static_cast<uint16_t>(((f32_bits >> 16) & 0x8000) | 0x7E00 | ((f32_bits >> 13) & 0x3FF));
}
uint16_t SpecNanToBF16(uint32_t f32_bits) {
  return static_cast<uint16_t>((f32_bits >> 16) | 0x0040);
}

uint16_t RefF32ToF16(float value) {
  return std::isnan(value) ? SpecNanToF16(Bits(value)) : RefEncode(value, kF16);
}
uint16_t RefF32ToBF16(float value) {
  return std::isnan(value) ? SpecNanToBF16(Bits(value)) : RefEncode(value, kBF16);
}

std::string Hex(uint32_t bits) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "0x%08X", bits);
  return buffer;
}

// ---------------------------------------------------------------------------
// Inputs.

// Every f32 halfway between two neighbouring finite values of `format` (the
// largest finite value's upper neighbour being the next power of two), plus
// the f32 just below and above each, both signs. These are where rounding
// mistakes live, and there are few enough to take all of them.
std::vector<float> TiesAndNeighbours(Format format) {
  std::vector<float> values;
  const uint16_t last_finite = static_cast<uint16_t>(format.InfBits() - 1);
  for (uint32_t bits = 0; bits <= last_finite; ++bits) {
    const double low = RefDecode(static_cast<uint16_t>(bits), format);
    const double high = RefDecode(static_cast<uint16_t>(bits + 1), format);  // Inf -> below.
    const double next = std::isinf(high) ? 2 * low - RefDecode(bits - 1, format) : high;
    const float tie = static_cast<float>((low + next) / 2);
    // Both formats are at least 3 bits narrower than f32, so the tie is exact.
    EXPECT_EQ(static_cast<double>(tie), (low + next) / 2);
    for (float v : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, INFINITY)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  return values;
}

// >= 2 million f32 values: uniform bit patterns (every class, NaN payloads
// included) and values concentrated where f16 and bf16 change behaviour.
std::vector<float> RandomSample() {
  std::mt19937_64 rng(0x5EED'F16B'F16ULL);
  std::uniform_int_distribution<uint32_t> any32;
  std::vector<float> values;
  values.reserve(2'200'000);
  for (int i = 0; i < 1'000'000; ++i) values.push_back(FromBits(any32(rng)));
  auto with_exponent = [&](uint32_t low, uint32_t high) {
    std::uniform_int_distribution<uint32_t> exponent(low, high);
    const uint32_t bits = (any32(rng) & 0x807FFFFF) | (exponent(rng) << 23);
    return FromBits(bits);
  };
  for (int i = 0; i < 200'000; ++i) {
    values.push_back(with_exponent(101, 114));  // f16 subnormals, around 2^-24 .. 2^-14.
    values.push_back(with_exponent(141, 143));  // f16 largest values and overflow.
    values.push_back(with_exponent(0, 0));      // f32 subnormals (bf16 keeps them).
    values.push_back(with_exponent(1, 2));      // smallest f32 normals.
    values.push_back(with_exponent(252, 254));  // bf16 overflow near FLT_MAX.
  }
  // Dense around the f16 overflow threshold 65520, both signs.
  std::uniform_int_distribution<int> offset(-20000, 20000);
  for (int i = 0; i < 100'000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(0x477FF000 + offset(rng));
    values.push_back(FromBits(bits | (i % 2 ? 0x80000000u : 0u)));
  }
  return values;
}

const std::vector<float>& Sample() {
  static const std::vector<float>* const sample = [] {
    auto* values = new std::vector<float>(RandomSample());
    for (Format format : {kF16, kBF16}) {
      const std::vector<float> ties = TiesAndNeighbours(format);
      values->insert(values->end(), ties.begin(), ties.end());
    }
    return values;
  }();
  return *sample;
}

class HalfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The reference relies on nearbyint rounding to nearest-even.
    ASSERT_EQ(std::fesetround(FE_TONEAREST), 0);
  }
  void TearDown() override { ForceScalarHalfConversions(false); }
};

// ---------------------------------------------------------------------------
// Named special cases.

TEST_F(HalfTest, F16SpecialCases) {
  EXPECT_EQ(F32ToF16Bits(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16Bits(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16Bits(INFINITY), 0x7C00);
  EXPECT_EQ(F32ToF16Bits(-INFINITY), 0xFC00);
  EXPECT_EQ(F32ToF16Bits(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16Bits(65504.0f), 0x7BFF);  // largest f16
  EXPECT_EQ(F32ToF16Bits(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(F32ToF16Bits(65520.0f), 0x7C00);  // tie with 65536 -> even -> Inf
  EXPECT_EQ(F32ToF16Bits(-65520.0f), 0xFC00);
  EXPECT_EQ(F32ToF16Bits(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(F32ToF16Bits(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(F32ToF16Bits(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(F32ToF16Bits(std::ldexp(1023.5f, -24)), 0x0400);  // tie -> even (normal)
  EXPECT_EQ(F32ToF16Bits(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(F32ToF16Bits(std::ldexp(1.0f, -25)), 0x0000);     // tie with 0 -> even
  EXPECT_EQ(F32ToF16Bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16Bits(std::ldexp(3.0f, -25)), 0x0002);         // tie 1|2 -> 2
  EXPECT_EQ(F32ToF16Bits(-std::ldexp(5.0f, -25)), 0x8002);        // tie 2|3 -> 2
  EXPECT_EQ(F32ToF16Bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie down to even
  EXPECT_EQ(F32ToF16Bits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie up to even
  EXPECT_EQ(F32ToF16Bits(FromBits(0x00000001)), 0x0000);          // f32 subnormal underflows
  EXPECT_EQ(F32ToF16Bits(FromBits(0x80000001)), 0x8000);

  EXPECT_EQ(F32ToF16Bits(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  EXPECT_EQ(F32ToF16Bits(-std::numeric_limits<float>::quiet_NaN()), 0xFE00);
  EXPECT_EQ(F32ToF16Bits(FromBits(0x7F800001)), 0x7E00);  // payload below f16's: still NaN
  EXPECT_EQ(F32ToF16Bits(FromBits(0x7FBFFFFF)), 0x7FFF);  // signaling -> quiet, payload kept
  EXPECT_EQ(F32ToF16Bits(FromBits(0xFFC02000)), 0xFE01);

  EXPECT_EQ(Bits(F16BitsToF32(0x0000)), 0x00000000u);
  EXPECT_EQ(Bits(F16BitsToF32(0x8000)), 0x80000000u);
  EXPECT_EQ(F16BitsToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(F16BitsToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16BitsToF32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(F16BitsToF32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(F16BitsToF32(0x7C00), INFINITY);
  EXPECT_EQ(F16BitsToF32(0xFC00), -INFINITY);
  EXPECT_EQ(Bits(F16BitsToF32(0x7E00)), 0x7FC00000u);
  EXPECT_EQ(Bits(F16BitsToF32(0x7C01)), 0x7FC02000u);  // signaling f16 comes back quiet
  EXPECT_EQ(Bits(F16BitsToF32(0xFFFF)), 0xFFFFE000u);
}

TEST_F(HalfTest, BF16SpecialCases) {
  EXPECT_EQ(F32ToBF16Bits(0.0f), 0x0000);
  EXPECT_EQ(F32ToBF16Bits(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBF16Bits(INFINITY), 0x7F80);
  EXPECT_EQ(F32ToBF16Bits(-INFINITY), 0xFF80);
  EXPECT_EQ(F32ToBF16Bits(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBF16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie down to even
  EXPECT_EQ(F32ToBF16Bits(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // tie up to even
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x7F7F0000)), 0x7F7F);         // largest bf16
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x7F7F8000)), 0x7F80);  // tie with 2^128 -> Inf
  EXPECT_EQ(F32ToBF16Bits(-std::numeric_limits<float>::max()), 0xFF80);
  // f32 subnormals are rounded, not flushed (what vcvtneps2bf16 would do).
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x00000001)), 0x0000);
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x00008000)), 0x0000);  // tie -> even 0
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x00008001)), 0x0001);
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x00018000)), 0x0002);  // tie -> even 2
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x807FFFFF)), 0x8080);  // rounds up to -smallest normal

  EXPECT_EQ(F32ToBF16Bits(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x7F800001)), 0x7FC0);  // would round to Inf without care
  EXPECT_EQ(F32ToBF16Bits(FromBits(0x7FFFFFFF)), 0x7FFF);  // would carry into the sign
  EXPECT_EQ(F32ToBF16Bits(FromBits(0xFF812345)), 0xFFC1);

  EXPECT_EQ(BF16BitsToF32(0x3F80), 1.0f);
  EXPECT_EQ(Bits(BF16BitsToF32(0x8000)), 0x80000000u);
  EXPECT_EQ(BF16BitsToF32(0x7F80), INFINITY);
  EXPECT_EQ(Bits(BF16BitsToF32(0x0001)), 0x00010000u);  // bf16 subnormal, exact
  EXPECT_EQ(Bits(BF16BitsToF32(0x7F81)), 0x7F810000u);  // exact: signaling stays signaling
}

// ---------------------------------------------------------------------------
// All 65,536 patterns, both formats, both directions.

TEST_F(HalfTest, F16DecodeAllPatterns) {
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t bits = static_cast<uint16_t>(i);
    const uint32_t got = Bits(F16BitsToF32(bits));
    if (RefIsNan(bits, kF16)) {
      const uint32_t want = ((i & 0x8000u) << 16) | 0x7FC00000u | ((i & 0x3FFu) << 13);
      ASSERT_EQ(got, want) << "f16 " << Hex(i);
    } else {
      ASSERT_EQ(got, Bits(static_cast<float>(RefDecode(bits, kF16)))) << "f16 " << Hex(i);
    }
  }
}

TEST_F(HalfTest, BF16DecodeAllPatterns) {
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t bits = static_cast<uint16_t>(i);
    const uint32_t got = Bits(BF16BitsToF32(bits));
    if (RefIsNan(bits, kBF16)) {
      ASSERT_TRUE(std::isnan(FromBits(got))) << "bf16 " << Hex(i);
      ASSERT_EQ(got, i << 16) << "bf16 " << Hex(i);
    } else {
      ASSERT_EQ(got, Bits(static_cast<float>(RefDecode(bits, kBF16)))) << "bf16 " << Hex(i);
    }
  }
}

TEST_F(HalfTest, F16RoundTripAllPatterns) {
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t bits = static_cast<uint16_t>(i);
    const uint16_t back = F32ToF16Bits(F16BitsToF32(bits));
    if (RefIsNan(bits, kF16)) {
      ASSERT_TRUE(RefIsNan(back, kF16)) << "f16 " << Hex(i);
      ASSERT_EQ(back, bits | 0x0200) << "f16 " << Hex(i);  // sign and payload kept, now quiet
    } else {
      ASSERT_EQ(back, bits) << "f16 " << Hex(i);
    }
  }
}

TEST_F(HalfTest, BF16RoundTripAllPatterns) {
  for (uint32_t i = 0; i <= 0xFFFF; ++i) {
    const uint16_t bits = static_cast<uint16_t>(i);
    const uint16_t back = F32ToBF16Bits(BF16BitsToF32(bits));
    if (RefIsNan(bits, kBF16)) {
      ASSERT_TRUE(RefIsNan(back, kBF16)) << "bf16 " << Hex(i);
      ASSERT_EQ(back, bits | 0x0040) << "bf16 " << Hex(i);
    } else {
      ASSERT_EQ(back, bits) << "bf16 " << Hex(i);
    }
  }
}

// ---------------------------------------------------------------------------
// f32 -> 16 bits against the reference: random sample plus every tie.

TEST_F(HalfTest, F32ToF16MatchesReference) {
  const std::vector<float>& sample = Sample();
  ASSERT_GE(sample.size(), 2'000'000u);
  for (float value : sample) {
    ASSERT_EQ(F32ToF16Bits(value), RefF32ToF16(value)) << "f32 " << Hex(Bits(value));
  }
}

TEST_F(HalfTest, F32ToBF16MatchesReference) {
  const std::vector<float>& sample = Sample();
  for (float value : sample) {
    ASSERT_EQ(F32ToBF16Bits(value), RefF32ToBF16(value)) << "f32 " << Hex(Bits(value));
  }
}

// ---------------------------------------------------------------------------
// Bulk conversions: identical to the scalar functions, bit for bit, on every
// path this CPU has (a cap above what it has just repeats the best path).

class HalfBulkTest : public HalfTest, public ::testing::WithParamInterface<HalfIsaCap> {
 protected:
  void SetUp() override {
    HalfTest::SetUp();
    CapHalfConversionIsa(GetParam());
    std::cout << "cap " << static_cast<int>(GetParam()) << ": " << HalfConversionPath()
              << std::endl;
  }
};

// (offset, length) windows: lengths around the 8- and 16-lane widths so that
// every tail length and misaligned start is taken, plus one long run.
std::vector<std::pair<size_t, size_t>> Windows(size_t total) {
  std::vector<std::pair<size_t, size_t>> windows;
  for (size_t offset : {0, 1, 3}) {
    for (size_t length = 0; length <= 40; ++length) windows.push_back({offset, length});
    windows.push_back({offset, 1001});
    windows.push_back({offset, total - offset});
  }
  return windows;
}

constexpr uint16_t kGuard16 = 0xA5A5;
constexpr uint32_t kGuard32 = 0xA5A5A5A5;

std::vector<uint16_t> AllPatterns() {
  std::vector<uint16_t> patterns(0x10000);
  for (uint32_t i = 0; i <= 0xFFFF; ++i) patterns[i] = static_cast<uint16_t>(i);
  return patterns;
}

void CheckEncode(void (*bulk)(const float*, uint16_t*, size_t), uint16_t (*scalar)(float)) {
  const std::vector<float>& in = Sample();
  std::vector<uint16_t> expected(in.size());
  for (size_t i = 0; i < in.size(); ++i) expected[i] = scalar(in[i]);
  for (auto [offset, length] : Windows(in.size())) {
    std::vector<uint16_t> out(length + 1, kGuard16);
    bulk(in.data() + offset, out.data(), length);
    for (size_t i = 0; i < length; ++i) {
      ASSERT_EQ(out[i], expected[offset + i])
          << "f32 " << Hex(Bits(in[offset + i])) << " at " << i << " of " << length;
    }
    ASSERT_EQ(out[length], kGuard16) << "wrote past the end, length " << length;
  }
}

void CheckDecode(void (*bulk)(const uint16_t*, float*, size_t), float (*scalar)(uint16_t)) {
  const std::vector<uint16_t> in = AllPatterns();
  for (auto [offset, length] : Windows(in.size())) {
    std::vector<float> out(length + 1, FromBits(kGuard32));
    bulk(in.data() + offset, out.data(), length);
    for (size_t i = 0; i < length; ++i) {
      ASSERT_EQ(Bits(out[i]), Bits(scalar(in[offset + i])))
          << "pattern " << Hex(in[offset + i]) << " at " << i << " of " << length;
    }
    ASSERT_EQ(Bits(out[length]), kGuard32) << "wrote past the end, length " << length;
  }
}

TEST_P(HalfBulkTest, ConvertF32ToF16) { CheckEncode(ConvertF32ToF16, F32ToF16Bits); }
TEST_P(HalfBulkTest, ConvertF32ToBF16) { CheckEncode(ConvertF32ToBF16, F32ToBF16Bits); }
TEST_P(HalfBulkTest, ConvertF16ToF32) { CheckDecode(ConvertF16ToF32, F16BitsToF32); }
TEST_P(HalfBulkTest, ConvertBF16ToF32) { CheckDecode(ConvertBF16ToF32, BF16BitsToF32); }

TEST_P(HalfBulkTest, RoundTrips) {
  const std::vector<float>& sample = Sample();
  // Longer than RoundTrip*'s internal chunk and not a multiple of it.
  for (size_t length : {size_t{0}, size_t{1}, size_t{17}, size_t{1237}, sample.size()}) {
    std::vector<float> f16(sample.begin(), sample.begin() + length);
    std::vector<float> bf16 = f16;
    RoundTripF16(f16.data(), length);
    RoundTripBF16(bf16.data(), length);
    for (size_t i = 0; i < length; ++i) {
      ASSERT_EQ(Bits(f16[i]), Bits(F16BitsToF32(F32ToF16Bits(sample[i])))) << Hex(Bits(sample[i]));
      ASSERT_EQ(Bits(bf16[i]), Bits(BF16BitsToF32(F32ToBF16Bits(sample[i]))))
          << Hex(Bits(sample[i]));
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// XINUSE (XGETBV with ECX = 1): which state components are not in their
// initial state. Bit 2: the upper halves of ymm0-15; bit 6: the upper
// halves of zmm0-15. Both are cleared by vzeroupper.
constexpr uint64_t kDirtyUpperState = (1u << 2) | (1u << 6);

bool CanReadXInUse() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  return __get_cpuid_count(0xD, 1, &a, &b, &c, &d) && (a & (1u << 2));
}
__attribute__((target("xsave"))) uint64_t XInUse() { return _xgetbv(1); }
__attribute__((target("avx"))) void ClearUpperState() { _mm256_zeroupper(); }

// A vector kernel must return with the upper register state clean: after
// one that does not, every SSE instruction of the (baseline-compiled) caller
// pays for it (half.cc; a LayerNorm's bf16 rows ran 2x slower). Lengths with
// and without a scalar tail.
TEST_P(HalfBulkTest, LeavesTheUpperVectorStateClean) {
  if (!CanReadXInUse()) GTEST_SKIP() << "XGETBV(1) not available";
  std::vector<float> f(257, 1.5f);
  std::vector<uint16_t> h(257);
  for (size_t n : {size_t{256}, size_t{257}}) {
    const std::pair<const char*, std::function<void()>> calls[] = {
        {"ConvertF32ToF16", [&] { ConvertF32ToF16(f.data(), h.data(), n); }},
        {"ConvertF32ToBF16", [&] { ConvertF32ToBF16(f.data(), h.data(), n); }},
        {"ConvertF16ToF32", [&] { ConvertF16ToF32(h.data(), f.data(), n); }},
        {"ConvertBF16ToF32", [&] { ConvertBF16ToF32(h.data(), f.data(), n); }},
    };
    for (const auto& [name, call] : calls) {
      ClearUpperState();
      call();
      EXPECT_EQ(XInUse() & kDirtyUpperState, 0u) << name << " of " << n;
    }
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(AllTiers, HalfBulkTest,
                         ::testing::Values(HalfIsaCap::kScalar, HalfIsaCap::kAvx2,
                                           HalfIsaCap::kAvx512),
                         [](const ::testing::TestParamInfo<HalfIsaCap>& info) {
                           switch (info.param) {
                             case HalfIsaCap::kScalar:
                               return "Scalar";
                             case HalfIsaCap::kAvx2:
                               return "Avx2";
                             case HalfIsaCap::kAvx512:
                               return "Avx512";
                           }
                           return "Unknown";
                         });

// ---------------------------------------------------------------------------
// Dispatch: the bulk tests above would pass if every path were scalar, so
// check the choice against what the CPU reports.

TEST_F(HalfTest, PathFollowsCpuAndOverrides) {
  const std::string best = HalfConversionPath();
  std::cout << "HalfConversionPath() = " << best << std::endl;
  RecordProperty("half_conversion_path", best);
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_EQ(best, "f16:avx512 bf16:avx512");
    CapHalfConversionIsa(HalfIsaCap::kAvx2);
    EXPECT_EQ(std::string(HalfConversionPath()), "f16:f16c bf16:avx2");
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
    EXPECT_EQ(best, "f16:f16c bf16:avx2");
  }
#endif
  ForceScalarHalfConversions(true);
  EXPECT_EQ(std::string(HalfConversionPath()), "scalar");
  ForceScalarHalfConversions(false);
  EXPECT_EQ(std::string(HalfConversionPath()), best);
}

}  // namespace
}  // namespace ampd::engine
