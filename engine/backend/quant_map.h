#ifndef AMPD_ENGINE_BACKEND_QUANT_MAP_H_
#define AMPD_ENGINE_BACKEND_QUANT_MAP_H_

// The code maps of blockwise 8-bit optimizer states (bitsandbytes' method,
// "8-bit Optimizers via Block-wise Quantization", Dettmers et al. 2022): a
// state tensor is cut into blocks of kQuantBlock values; each block keeps one
// f32 absmax and one uint8 code per value, the value being
// map[code] * absmax. Adam's first moment (signed) uses the dynamic map, its
// second moment (never negative) the unsigned dynamic map: bitsandbytes'
// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8). For each
// decade i = 0..6 they hold the midpoints of linspace(0.1, 1) bins scaled by
// 10^(i-6), 2^i per sign (signed) or 2^(i+1) (unsigned) of them, plus 0 and
// 1: 256 sorted values. The values here are bitsandbytes' own f32 numbers (its
// linspace rounds in f32), so codes mean the same in both; the derivation in
// exact arithmetic agrees with them to 2 ulp (tests/engine/backend).

#include <array>
#include <cstdint>
#include <cstring>

namespace ampd::engine::backend {

inline constexpr int64_t kQuantBlock = 256;

// The number of blocks (absmax values) of an n-value state.
inline int64_t QuantBlocks(int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; }

const std::array<float, 256>& DynamicMap();          // signed
const std::array<float, 256>& UnsignedDynamicMap();  // unsigned

// The map's identity, stored with checkpoints beside the map itself.
inline constexpr char kDynamicMapName[] = "bnb-dynamic-signed-8bit";
inline constexpr char kUnsignedDynamicMapName[] = "bnb-dynamic-unsigned-8bit";

// Nearest code to `x` (already divided by its block's absmax, so in
// [-1, 1]); ties go to the smaller code. Exact for every value of the map.
uint8_t NearestCode(const std::array<float, 256>& map, float x);

// NearestCode as one lookup (what the CPU kernels use): a float's top 16 bits
// (sign, exponent, 7 mantissa bits) pick a bucket; the maps are never denser
// than one decision threshold per bucket, so x takes the code of the
// bucket's lowest value or the next one. threshold[c] is the largest float
// NearestCode gives code c (+inf for 255). A bucket's entry packs its code
// (bits 16..23) and the low 16 bits of the threshold inside it (0xFFFF when
// none is), so one 4-byte load and an integer compare decide:
//   code = (entry >> 16) + (low16(x) > (entry & 0xFFFF)),
// with negative buckets' low bits (x's and the threshold's) complemented,
// since a more negative float has the larger bit pattern. Built once, and
// checked, for the engine's two maps.
struct CodeTable {
  std::array<uint32_t, 65536> entry;
  std::array<float, 256> threshold;
  static uint32_t Low16(uint32_t bits) {
    return (bits & 0xFFFFu) ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) & 0xFFFFu);
  }
  uint8_t Code(float x) const {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const uint32_t e = entry[bits >> 16];
    return static_cast<uint8_t>((e >> 16) + (Low16(bits) > (e & 0xFFFFu)));
  }
};
// The table of DynamicMap() or UnsignedDynamicMap(); null for any other map.
const CodeTable* CodeTableFor(const std::array<float, 256>& map);
// NearestCode through the map's table when it has one.
uint8_t FastNearestCode(const std::array<float, 256>& map, float x);

// Blockwise quantization of n values: absmax[b] = max |x| over block b (a
// block of zeros gets absmax 0 and code of 0), codes[i] = NearestCode(x / absmax).
void QuantizeBlockwise(const std::array<float, 256>& map, const float* x, int64_t n, uint8_t* codes,
                       float* absmax);
void DequantizeBlockwise(const std::array<float, 256>& map, const uint8_t* codes,
                         const float* absmax, int64_t n, float* x);

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_QUANT_MAP_H_
