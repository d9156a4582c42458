// E4M3 and E5M2 against an independent reference: values decoded from the
// format's definition with ldexp, and rounding as a search for the nearest
// representable value (ties to the even code) in a sorted table that also
// holds the first value beyond the range, so that overflow is found the same
// way. All 256 patterns both ways, every bf16 and f16 value, the midpoints
// between neighbours, and a large random f32 sample.
#include "engine/core/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "gtest/gtest.h"

namespace ampd::engine::core {
namespace {

struct Format {
  Fp8Format f;
  int exp_bits, mant_bits, bias;
  bool has_inf;
};
void PrintTo(const Format& f, std::ostream* os) { *os << Fp8FormatName(f.f); }
const Format kE4M3{Fp8Format::kE4M3, 4, 3, 7, false};
const Format kE5M2{Fp8Format::kE5M2, 5, 2, 15, true};

// The format's definition. NaN for the NaN patterns, Inf for E5M2's.
double Decode(const Format& fmt, int code) {
  const int sign = code >> 7;
  const int e = (code >> fmt.mant_bits) & ((1 << fmt.exp_bits) - 1);
  const int m = code & ((1 << fmt.mant_bits) - 1);
  const int e_max = (1 << fmt.exp_bits) - 1;
  double v;
  if (fmt.has_inf && e == e_max) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
  } else if (!fmt.has_inf && e == e_max && m == (1 << fmt.mant_bits) - 1) {
    v = std::nan("");
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - fmt.bias - fmt.mant_bits);
  } else {
    v = std::ldexp(1.0 + static_cast<double>(m) / (1 << fmt.mant_bits), e - fmt.bias);
  }
  return sign ? -v : v;
}

// Non-negative finite values by code, ascending, plus the next value past the
// largest (code -1: it stands for "overflow").
struct Table {
  std::vector<std::pair<double, int>> values;
  double max = 0;
  int max_code = 0;
};
Table MakeTable(const Format& fmt) {
  Table t;
  for (int c = 0; c < 128; ++c) {
    const double v = Decode(fmt, c);
    if (std::isfinite(v)) t.values.emplace_back(v, c);
  }
  std::sort(t.values.begin(), t.values.end());
  t.max = t.values.back().first;
  t.max_code = t.values.back().second;
  // The code after the largest read as if it were an ordinary normal number
  // (it is NaN in E4M3, Inf in E5M2).
  const int next = t.max_code + 1;
  const int e = next >> fmt.mant_bits, m = next & ((1 << fmt.mant_bits) - 1);
  t.values.emplace_back(
      std::ldexp(1.0 + static_cast<double>(m) / (1 << fmt.mant_bits), e - fmt.bias), -1);
  return t;
}

int Reference(const Format& fmt, const Table& t, float x, bool saturate) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  const int nan = fmt.has_inf ? 0x7E : 0x7F;
  const int overflow = saturate ? t.max_code : (fmt.has_inf ? 0x7C : 0x7F);
  if (std::isnan(x)) return sign | nan;
  if (std::isinf(x)) return sign | overflow;
  const double a = std::fabs(static_cast<double>(x));
  auto hi = std::lower_bound(t.values.begin(), t.values.end(), std::make_pair(a, -2));
  int code;
  if (hi == t.values.end()) {
    code = -1;
  } else if (hi == t.values.begin() || hi->first == a) {
    code = hi->second;
  } else {
    auto lo = hi - 1;
    const double dl = a - lo->first, dh = hi->first - a;
    if (dl < dh) {
      code = lo->second;
    } else if (dh < dl) {
      code = hi->second;
    } else {  // a tie: the even code of the two (codes of neighbours are consecutive)
      code = (lo->second & 1) == 0 ? lo->second : hi->second;
    }
  }
  return sign | (code == -1 ? overflow : code);
}

float F(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

void ExpectSameBits(float a, double b, const std::string& what) {
  if (std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a)) << what;
    return;
  }
  EXPECT_EQ(static_cast<double>(a), b) << what;
  EXPECT_EQ(std::signbit(a), std::signbit(b)) << what;
}

class Fp8Test : public ::testing::TestWithParam<Format> {};

TEST_P(Fp8Test, All256PatternsDecodeAsDefinedAndRoundTrip) {
  const Format& fmt = GetParam();
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = Fp8ToF32(static_cast<uint8_t>(c), fmt.f);
    ExpectSameBits(v, Decode(fmt, c), "code " + std::to_string(c));
    if (std::isnan(v)) {
      ++nans;
      continue;
    }
    for (bool saturate : {false, true}) {
      if (std::isinf(v) && saturate) continue;
      EXPECT_EQ(F32ToFp8(v, fmt.f, saturate), c) << "code " << c;
    }
  }
  EXPECT_EQ(nans, fmt.has_inf ? 6 : 2);  // E5M2: 3 mantissas x 2 signs; E4M3: 0x7F, 0xFF
  EXPECT_EQ(Fp8ToF32(0x7E, Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(Fp8ToF32(0x7B, Fp8Format::kE5M2), 57344.0f);
  EXPECT_EQ(Fp8ToF32(0x01, Fp8Format::kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8ToF32(0x01, Fp8Format::kE5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(Fp8Max(fmt.f), MakeTable(fmt).max);
}

TEST_P(Fp8Test, EveryBf16AndF16ValueRoundsAsTheReference) {
  const Format& fmt = GetParam();
  const Table t = MakeTable(fmt);
  for (uint32_t h = 0; h < 65536; ++h) {
    for (const float x :
         {BF16BitsToF32(static_cast<uint16_t>(h)), F16BitsToF32(static_cast<uint16_t>(h))}) {
      for (bool saturate : {false, true}) {
        ASSERT_EQ(F32ToFp8(x, fmt.f, saturate), Reference(fmt, t, x, saturate))
            << x << " saturate " << saturate;
      }
    }
  }
}

TEST_P(Fp8Test, MidpointsTiesAndOverflowRoundAsTheReference) {
  const Format& fmt = GetParam();
  const Table t = MakeTable(fmt);
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max()};
  for (size_t i = 0; i + 1 < t.values.size(); ++i) {
    const float mid = static_cast<float>((t.values[i].first + t.values[i + 1].first) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  for (float x : xs) {
    for (bool saturate : {false, true}) {
      EXPECT_EQ(F32ToFp8(x, fmt.f, saturate), Reference(fmt, t, x, saturate))
          << x << " saturate " << saturate;
    }
  }
  // The documented edges.
  if (fmt.f == Fp8Format::kE4M3) {
    EXPECT_EQ(F32ToFp8(464.0f, fmt.f, false), 0x7E);  // the tie goes to even 448
    EXPECT_EQ(F32ToFp8(465.0f, fmt.f, false), 0x7F);  // NaN: E4M3 has no Inf
    EXPECT_EQ(F32ToFp8(-1e6f, fmt.f, true), 0xFE);    // -448
  } else {
    EXPECT_EQ(F32ToFp8(61439.0f, fmt.f, false), 0x7B);
    EXPECT_EQ(F32ToFp8(61440.0f, fmt.f, false), 0x7C);  // the tie goes to even: Inf
    EXPECT_EQ(F32ToFp8(-1e6f, fmt.f, true), 0xFB);      // -57344
  }
}

TEST_P(Fp8Test, ALargeRandomSampleRoundsAsTheReference) {
  const Format& fmt = GetParam();
  const Table t = MakeTable(fmt);
  std::mt19937 gen(17);
  std::uniform_int_distribution<uint32_t> any;
  // Exponents around the format's range, then any bit pattern at all.
  std::uniform_int_distribution<uint32_t> exponent(127 - fmt.bias - fmt.mant_bits - 3,
                                                   127 + (1 << fmt.exp_bits) - fmt.bias + 2);
  for (int i = 0; i < 1'000'000; ++i) {
    const uint32_t near = (any(gen) & 0x807FFFFF) | (exponent(gen) << 23);
    for (const float x : {F(near), F(any(gen))}) {
      const bool saturate = (i & 1) != 0;
      ASSERT_EQ(F32ToFp8(x, fmt.f, saturate), Reference(fmt, t, x, saturate))
          << x << " saturate " << saturate;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(kE4M3, kE5M2), [](const auto& info) {
  return std::string(info.param.f == Fp8Format::kE4M3 ? "E4M3" : "E5M2");
});

}  // namespace
}  // namespace ampd::engine::core
