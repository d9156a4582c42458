// The CPU's blockwise (de)quantization paths (AVX-512 VBMI, AVX-512, AVX2 and
// scalar) against backend::QuantizeBlockwise / DequantizeBlockwise, bit for
// bit: random blocks over every decade, values on and next to each decision
// threshold, a sweep over the floats of [-1, 1], a block of zeros, a block
// whose 1 / absmax overflows, partial blocks and lengths that are not
// multiples of 16 or 64.

#include "engine/cpu/blockwise_quant.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/quant_map.h"
#include "gtest/gtest.h"

namespace ampd::engine::cpu {
namespace {

using backend::CodeTableFor;
using backend::DynamicMap;
using backend::QuantBlocks;
using backend::UnsignedDynamicMap;

std::vector<float> Values(bool is_signed, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(is_signed ? -1.0f : 0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    // Blocks of different scales, and values spread over every decade.
    x[i] = u(rng) * std::pow(10.0f, -static_cast<float>(i % 7)) * (1 + (i / 256) % 5);
  }
  for (int64_t i = 256; i < std::min<int64_t>(n, 512); ++i) x[i] = 0;  // a zero block
  return x;
}

// The SIMD paths this CPU runs (each is compared with the scalar reference).
std::vector<QuantPath> SimdPaths() {
  std::vector<QuantPath> paths;
  for (QuantPath p : {QuantPath::kAvx2, QuantPath::kAvx512, QuantPath::kAvx512Vbmi}) {
    if (HasQuantPath(p)) paths.push_back(p);
  }
  return paths;
}

TEST(BlockwiseQuantTest, EveryPathGivesTheReferenceCodesAndValues) {
  if (SimdPaths().empty()) GTEST_SKIP() << "no AVX2 or AVX-512F here: only the scalar path runs";
  for (QuantPath path : SimdPaths()) {
    SCOPED_TRACE(QuantPathName(path));
    for (const auto* map : {&DynamicMap(), &UnsignedDynamicMap()}) {
      const bool is_signed = map == &DynamicMap();
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{15}, int64_t{63}, int64_t{100},
                        int64_t{256}, int64_t{2048}, int64_t{5 * 256 + 77}}) {
        std::vector<float> x = Values(is_signed, n, static_cast<uint32_t>(n));
        std::vector<uint8_t> want(n), got(n);
        std::vector<float> want_max(QuantBlocks(n)), got_max(QuantBlocks(n));
        backend::QuantizeBlockwise(*map, x.data(), n, want.data(), want_max.data());
        QuantizeBlocks(*map, x.data(), n, got.data(), got_max.data(), path);
        ASSERT_EQ(got, want) << "n " << n;
        ASSERT_EQ(got_max, want_max) << "n " << n;
        std::vector<float> want_x(n), got_x(n);
        backend::DequantizeBlockwise(*map, want.data(), want_max.data(), n, want_x.data());
        DequantizeBlocks(*map, want.data(), want_max.data(), n, got_x.data(), path);
        ASSERT_EQ(got_x, want_x) << "n " << n;
      }
    }
  }
}

TEST(BlockwiseQuantTest, TheBestPathIsTheWidestThisCpuHas) {
  const std::string best = QuantPathName(QuantPath::kBest);
  if (HasQuantPath(QuantPath::kAvx512Vbmi)) {
    EXPECT_EQ(best, "avx512-vbmi");
  } else if (HasQuantPath(QuantPath::kAvx512)) {
    EXPECT_EQ(best, "avx512");
  } else if (HasQuantPath(QuantPath::kAvx2)) {
    EXPECT_EQ(best, "avx2");
  } else {
    EXPECT_EQ(best, "scalar");
  }
  EXPECT_EQ(std::string(QuantPathName(QuantPath::kScalar)), "scalar");
}

TEST(BlockwiseQuantTest, ValuesAtTheDecisionThresholdsTakeTheBinarySearchsCode) {
  for (const auto* map : {&DynamicMap(), &UnsignedDynamicMap()}) {
    ASSERT_NE(CodeTableFor(*map), nullptr);
    const auto& threshold = CodeTableFor(*map)->threshold;
    // One block whose absmax is 1: each value is quantized as it is.
    std::vector<float> x = {1.0f};
    for (int c = 0; c < 255; ++c) {
      x.push_back(threshold[c]);
      x.push_back(std::nextafter(threshold[c], 2.0f));
      x.push_back(std::nextafter(threshold[c], -2.0f));
    }
    x.resize(((x.size() + 255) / 256) * 256, 1.0f);  // whole blocks, each with a 1
    for (size_t b = 0; b < x.size(); b += 256) x[b] = 1.0f;
    const int64_t n = static_cast<int64_t>(x.size());
    for (QuantPath path :
         {QuantPath::kScalar, QuantPath::kAvx2, QuantPath::kAvx512, QuantPath::kAvx512Vbmi}) {
      if (!HasQuantPath(path)) continue;
      std::vector<uint8_t> codes(n);
      std::vector<float> absmax(QuantBlocks(n));
      QuantizeBlocks(*map, x.data(), n, codes.data(), absmax.data(), path);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(codes[i], backend::NearestCode(*map, x[i])) << x[i];
      }
    }
  }
}

// Every 61st float of [-1, 1] (about 35 million, each exponent and sign
// many times), in blocks led by 1.0 so that each is coded as it is, and
// every code decoded back: each SIMD path equals the reference.
TEST(BlockwiseQuantTest, ASweepOverTheFloatsOfMinusOneToOneMatchesTheReference) {
  if (SimdPaths().empty()) GTEST_SKIP() << "no AVX2 or AVX-512F here: only the scalar path runs";
  std::vector<float> x;
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t bits = 0; bits <= 0x3F800000u; bits += 61) {
      if (x.size() % 256 == 0) x.push_back(1.0f);
      const uint32_t b = bits | sign;
      float v;
      std::memcpy(&v, &b, 4);
      x.push_back(v);
    }
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> want(n), got(n);
  std::vector<float> absmax(QuantBlocks(n)), got_max(QuantBlocks(n));
  std::vector<float> want_x(n), got_x(n);
  for (const auto* map : {&DynamicMap(), &UnsignedDynamicMap()}) {
    backend::QuantizeBlockwise(*map, x.data(), n, want.data(), absmax.data());
    backend::DequantizeBlockwise(*map, want.data(), absmax.data(), n, want_x.data());
    for (QuantPath path : SimdPaths()) {
      SCOPED_TRACE(QuantPathName(path));
      QuantizeBlocks(*map, x.data(), n, got.data(), got_max.data(), path);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], want[i]) << "x " << x[i];
      }
      ASSERT_EQ(got_max, absmax);
      DequantizeBlocks(*map, want.data(), absmax.data(), n, got_x.data(), path);
      ASSERT_EQ(got_x, want_x);
    }
  }
}

// A block of denormals so small that 1 / absmax overflows to +inf: the
// SIMD paths give the reference's codes there too.
TEST(BlockwiseQuantTest, ABlockWhoseInverseAbsmaxOverflowsTakesTheReferenceCodes) {
  std::vector<float> x(300);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::ldexp(static_cast<float>(i % 17) - 8.0f, -140);  // |x| < 2^-136
  }
  const int64_t n = static_cast<int64_t>(x.size());
  for (const auto* map : {&DynamicMap(), &UnsignedDynamicMap()}) {
    std::vector<uint8_t> want(n), got(n);
    std::vector<float> want_max(QuantBlocks(n)), got_max(QuantBlocks(n));
    backend::QuantizeBlockwise(*map, x.data(), n, want.data(), want_max.data());
    ASSERT_TRUE(std::isinf(1.0f / want_max[0]));
    for (QuantPath path : SimdPaths()) {
      SCOPED_TRACE(QuantPathName(path));
      QuantizeBlocks(*map, x.data(), n, got.data(), got_max.data(), path);
      EXPECT_EQ(got, want);
      EXPECT_EQ(got_max, want_max);
    }
  }
}

// Blocks holding a NaN or an infinity (states a non-finite gradient would
// make, were it not refused first): every path still gives the reference's
// codes and absmax, wherever in the block the odd value sits.
TEST(BlockwiseQuantTest, NonFiniteValuesTakeTheReferencesCodes) {
  const float odd[] = {
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (const auto* map : {&DynamicMap(), &UnsignedDynamicMap()}) {
    for (float bad : odd) {
      for (int64_t at : {int64_t{0}, int64_t{17}, int64_t{255}, int64_t{256 + 100}}) {
        std::vector<float> x = Values(map == &DynamicMap(), 600, 7);
        x[at] = bad;
        const int64_t n = static_cast<int64_t>(x.size());
        std::vector<uint8_t> want(n), got(n);
        std::vector<float> want_max(QuantBlocks(n)), got_max(QuantBlocks(n));
        backend::QuantizeBlockwise(*map, x.data(), n, want.data(), want_max.data());
        for (QuantPath path : SimdPaths()) {
          SCOPED_TRACE(std::string(QuantPathName(path)) + " at " + std::to_string(at));
          QuantizeBlocks(*map, x.data(), n, got.data(), got_max.data(), path);
          EXPECT_EQ(got, want) << bad;
          for (size_t b = 0; b < want_max.size(); ++b) {
            EXPECT_TRUE(got_max[b] == want_max[b] ||
                        (std::isnan(got_max[b]) && std::isnan(want_max[b])))
                << bad << " block " << b << ": " << got_max[b] << " vs " << want_max[b];
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ampd::engine::cpu
