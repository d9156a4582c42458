// bitsandbytes' dynamic code maps, derived here from their definition and
// checked against the table ampd uses (bitsandbytes' own f32 values), and the
// blockwise quantization's exactness and error bound.
#include "engine/backend/quant_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::engine::backend {
namespace {

// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8) in exact
// arithmetic: per decade i = 0..6 the midpoints of linspace(0.1, 1) bins,
// 2^i per sign (signed) or 2^(i+1) (unsigned), scaled by 10^(i-6); plus 0, 1.
std::vector<double> Derived(bool is_signed) {
  std::vector<double> v;
  for (int i = 0; i < 7; ++i) {
    const int bins = is_signed ? 1 << i : 1 << (i + 1);
    const double scale = std::pow(10.0, i - 6);
    for (int j = 0; j < bins; ++j) {
      const double lo = 0.1 + 0.9 * j / bins, hi = 0.1 + 0.9 * (j + 1) / bins;
      v.push_back(scale * (lo + hi) / 2);
      if (is_signed) v.push_back(-scale * (lo + hi) / 2);
    }
  }
  v.push_back(0);
  v.push_back(1);
  std::sort(v.begin(), v.end());
  return v;
}

int32_t Bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(QuantMapTest, BothMapsFollowTheirDefinitionToTwoUlps) {
  for (const bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    const std::array<float, 256>& map = is_signed ? DynamicMap() : UnsignedDynamicMap();
    const std::vector<double> derived = Derived(is_signed);
    ASSERT_EQ(derived.size(), 256u);
    for (int i = 0; i < 256; ++i) {
      // bitsandbytes rounds its linspace in f32: its values are within 2 ulp
      // of the exact ones, and 0 and 1 are exact.
      EXPECT_LE(std::abs(Bits(map[i]) - Bits(static_cast<float>(derived[i]))), 2) << i;
      if (i > 0) {
        EXPECT_LT(map[i - 1], map[i]) << "sorted, distinct: " << i;
      }
    }
    EXPECT_EQ(map[255], 1.0f);
  }
  // Spot values of bitsandbytes' tables.
  EXPECT_EQ(DynamicMap()[0], -0x1.fc6666p-1f);  // no -1: the signed map is lopsided
  EXPECT_EQ(DynamicMap()[127], 0.0f);
  EXPECT_EQ(DynamicMap()[128], 0x1.27476ep-21f);
  EXPECT_EQ(UnsignedDynamicMap()[0], 0.0f);
  EXPECT_EQ(UnsignedDynamicMap()[1], 0x1.5cf754p-22f);
  EXPECT_EQ(UnsignedDynamicMap()[128], 0x1.c4ccccp-4f);
  EXPECT_EQ(UnsignedDynamicMap()[254], 0x1.fe3334p-1f);
}

TEST(QuantMapTest, EveryMapValueRoundTripsExactly) {
  for (const auto* map : {&DynamicMap(), &UnsignedDynamicMap()}) {
    for (int c = 0; c < 256; ++c) EXPECT_EQ(NearestCode(*map, (*map)[c]), c);
    // And through a block whose absmax is a power of two (exact scaling).
    std::vector<float> x(256), back(256);
    for (int c = 0; c < 256; ++c) x[c] = (*map)[c] * 4.0f;
    std::vector<uint8_t> codes(256);
    float absmax = 0;
    QuantizeBlockwise(*map, x.data(), 256, codes.data(), &absmax);
    EXPECT_EQ(absmax, 4.0f);
    DequantizeBlockwise(*map, codes.data(), &absmax, 256, back.data());
    EXPECT_EQ(back, x);
  }
}

TEST(QuantMapTest, RandomBlocksAreWithinTheMapsGapOfTheirValues) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  for (const bool is_signed : {true, false}) {
    const std::array<float, 256>& map = is_signed ? DynamicMap() : UnsignedDynamicMap();
    const int64_t n = 256 * 7 + 100;  // a partial last block
    std::vector<float> x(n), back(n);
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng) * (1 + i / 256);  // blocks of different scales
      x[i] = is_signed ? v : v * v;
    }
    std::vector<uint8_t> codes(n);
    std::vector<float> absmax(QuantBlocks(n));
    QuantizeBlockwise(map, x.data(), n, codes.data(), absmax.data());
    DequantizeBlockwise(map, codes.data(), absmax.data(), n, back.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / kQuantBlock;
      const float a = absmax[b];
      // The block's absmax is its largest magnitude: exact when positive
      // (the maps end at 1; the signed one starts at -0.993, not -1).
      if (x[i] == a) {
        EXPECT_EQ(back[i], a) << i;
      }
      // Nearest code: no other code is closer (up to the scaling's rounding).
      const int c = codes[i];
      const float err = std::fabs(x[i] - back[i]);
      for (int d : {c - 1, c + 1}) {
        if (d < 0 || d > 255) continue;
        EXPECT_LE(err, std::fabs(x[i] - map[d] * a) * (1 + 1e-6f) + 1e-30f) << i;
      }
      // And so within half the map's widest gap, relative to the block's
      // absmax: the top decade's bins are 0.9/64 (signed) or 0.9/128 wide.
      EXPECT_LE(err, (is_signed ? 0.45f / 64 : 0.45f / 128) * a * (1 + 1e-5f)) << i;
    }
  }
}

TEST(QuantMapTest, TheTableCoderEqualsTheBinarySearchEverywhere) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const auto* map : {&DynamicMap(), &UnsignedDynamicMap()}) {
    std::vector<float> probe;
    for (float v : *map) {  // every value, its float neighbours, and the midpoints
      probe.push_back(v);
      probe.push_back(std::nextafter(v, 2.0f));
      probe.push_back(std::nextafter(v, -2.0f));
    }
    for (int c = 0; c + 1 < 256; ++c) {
      const float mid = ((*map)[c] + (*map)[c + 1]) / 2;
      for (float v : {mid, std::nextafter(mid, 2.0f), std::nextafter(mid, -2.0f)}) {
        probe.push_back(v);
      }
    }
    for (int i = 0; i < 200000; ++i) {
      const float u = uniform(rng);
      probe.push_back(u);
      probe.push_back(u * std::pow(10.0f, -static_cast<float>(i % 9)));  // every decade
    }
    for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 1e-30f, -1e-30f, 2.0f}) probe.push_back(v);
    // Both ends of every one of the table's 65536 buckets (top 16 bits), and
    // each threshold's float neighbours: the table's code can only change
    // at those, so this covers every finite float.
    for (uint32_t key = 0; key < 65536; ++key) {
      for (uint32_t low : {0x0000u, 0x0001u, 0xFFFEu, 0xFFFFu}) {
        uint32_t bits = (key << 16) | low;
        float v;
        std::memcpy(&v, &bits, 4);
        if (std::isfinite(v)) probe.push_back(v);
      }
    }
    for (float t : CodeTableFor(*map)->threshold) {
      if (!std::isfinite(t)) continue;
      for (float v : {t, std::nextafter(t, 2.0f), std::nextafter(t, -2.0f)}) probe.push_back(v);
    }
    for (float v : probe) ASSERT_EQ(FastNearestCode(*map, v), NearestCode(*map, v)) << v;
  }
}

TEST(QuantMapTest, AZeroBlockIsZero) {
  std::vector<float> x(300, 0.0f), back(300, 1.0f);
  std::vector<uint8_t> codes(300);
  float absmax[2] = {-1, -1};
  QuantizeBlockwise(DynamicMap(), x.data(), 300, codes.data(), absmax);
  EXPECT_EQ(absmax[0], 0.0f);
  EXPECT_EQ(absmax[1], 0.0f);
  DequantizeBlockwise(DynamicMap(), codes.data(), absmax, 300, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace ampd::engine::backend
