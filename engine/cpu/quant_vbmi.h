#ifndef AMPD_ENGINE_CPU_QUANT_VBMI_H_
#define AMPD_ENGINE_CPU_QUANT_VBMI_H_

// The AVX-512 VBMI blockwise coder's pieces (blockwise_quant.h), shared by
// the block (de)quantizers and the fused 8-bit AdamW step
// (optimizers8bit.cc), which codes its states as it updates them. Internal
// to engine/cpu. Every function here is inlined into callers built for
// AMPD_QUANT_VBMI_ISA; they call them only where HasQuantPath(kAvx512Vbmi).

#include <array>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
// As in core/half.cc: GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized
// on their own placeholders; silenced across the include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define AMPD_QUANT_X86 1
// What the VBMI coder needs (HasQuantPath(kAvx512Vbmi) checks each).
#define AMPD_QUANT_VBMI_ISA "avx512f,avx512bw,avx512dq,avx512vbmi,avx512vbmi2"
#endif

namespace ampd::engine::cpu::vbmi {

// A float's bits as a signed integer in the same order: negative floats'
// magnitude bits are flipped (-0 lands just below +0; no threshold is 0).
inline int32_t OrderedKey(float f) {
  int32_t b;
  std::memcpy(&b, &f, 4);
  return b ^ ((b >> 31) & 0x7FFFFFFF);
}

// The VBMI coders' tables of one map (PermuteTablesFor).
struct PermuteTables {
  // The high halves of the 255 decision thresholds' ordered keys
  // (CodeTable::threshold, OrderedKey) as an implicit binary search tree:
  // node k (1..255) at depth d = floor(log2 k), j = k - 2^d, holds
  // threshold[(2j + 1) * 2^(7 - d) - 1]; children 2k and 2k + 1. Slot 0 is
  // unused. The halves are strictly increasing (CodeTable: at most one
  // threshold per 16-bit bucket).
  alignas(64) int16_t node[256];
  // threshold_plane[b][c] = byte b of threshold[c]'s bits; c = 255 (no
  // threshold above the last code) holds +inf.
  alignas(64) uint8_t threshold_plane[4][256];
  // plane[b][c] = byte b (little-endian) of map[c]'s bits.
  alignas(64) uint8_t plane[4][256];
  // The order Lookup64 permutes 64 codes into (see there).
  alignas(64) uint8_t code_order[64];
  // Byte p of the low bytes of 64 words in two registers (2p), and the same
  // in code_order (2 code_order[p]).
  alignas(64) uint8_t low_bytes[64];
  alignas(64) uint8_t low_bytes_in_code_order[64];
};

// The tables of DynamicMap() or UnsignedDynamicMap(); null for other maps,
// or where a map's thresholds break the search's premises.
const PermuteTables* PermuteTablesFor(const std::array<float, 256>& map);

#ifdef AMPD_QUANT_X86
// The VBMI coder. A value's code is the number of decision thresholds below
// it (ties to the smaller code, as NearestCode).
//  1. Its ordered key's high half (16 bits) is searched for among the
//     thresholds' high halves, 32 lanes at a time: eight levels of the tree,
//     each fetching the lanes' nodes by a permute from registers (depth 0: a
//     broadcast; 1-5: one table of 64 words; 6: another; 7: two, bit 6
//     choosing). A lane goes right when its half is greater, so it ends at
//     256 + c, c the number of thresholds whose half is below its own.
//  2. The next threshold, c, is the only one whose half can equal the
//     lane's: its value (four byte-plane lookups, as in Lookup64) and one
//     float compare give the code, c or c + 1.
// Several searches are interleaved level by level, to hide the chain of
// eight permute-subtract-shift latencies. Zen 5 runs these integer vector
// operations two a cycle, so every one counts: 16-bit lanes halve the
// search's work against 32-bit ones, and no step goes through a mask
// register (a compare into a mask and a masked add cost half as much again).
//
// Descend16: k = 2k + (half > node), one level: the saturating difference
// node - half is negative exactly when half > node, and vpshldw shifts its
// sign bit into k.
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline __m512i Descend16(__m512i k,
                                                                                     __m512i half,
                                                                                     __m512i node) {
  return _mm512_shldi_epi16(k, _mm512_subs_epi16(node, half), 1);
}

// One map's search tree in registers.
struct Tree {
  __m512i root, top0, top1, t64, t96, t128, t160, t192, t224;
};

__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline Tree LoadTree(
    const int16_t* node) {
  return {
      _mm512_set1_epi16(node[1]),    _mm512_load_si512(node),       _mm512_load_si512(node + 32),
      _mm512_load_si512(node + 64),  _mm512_load_si512(node + 96),  _mm512_load_si512(node + 128),
      _mm512_load_si512(node + 160), _mm512_load_si512(node + 192), _mm512_load_si512(node + 224)};
}

// The searches of N vectors of halves, the first NA in tree a, the rest in
// tree b; k[v] ends at 256 + c.
template <int N, int NA>
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline void SearchHalves(
    const Tree& a, const Tree& b, const __m512i* half, __m512i* k) {
#pragma GCC unroll 8
  for (int v = 0; v < N; ++v) {
    k[v] = Descend16(_mm512_set1_epi16(1), half[v], v < NA ? a.root : b.root);
  }
#pragma GCC unroll 5
  for (int depth = 1; depth < 6; ++depth) {  // k in 2..63: the low 6 bits
#pragma GCC unroll 8
    for (int v = 0; v < N; ++v) {
      const Tree& t = v < NA ? a : b;
      k[v] = Descend16(k[v], half[v], _mm512_permutex2var_epi16(t.top0, k[v], t.top1));
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < N; ++v) {  // k in 64..127
    const Tree& t = v < NA ? a : b;
    k[v] = Descend16(k[v], half[v], _mm512_permutex2var_epi16(t.t64, k[v], t.t96));
  }
#pragma GCC unroll 8
  for (int v = 0; v < N; ++v) {  // k in 128..255: bit 6 picks the half of the level
    const Tree& t = v < NA ? a : b;
    const __m512i lo = _mm512_subs_epi16(_mm512_permutex2var_epi16(t.t128, k[v], t.t160), half[v]);
    const __m512i hi = _mm512_subs_epi16(_mm512_permutex2var_epi16(t.t192, k[v], t.t224), half[v]);
    // Only bit 15 of the difference matters to vpshldw: bit 6 of k moved
    // there chooses it (vpternlogd's table 0xCA is A ? B : C, bit by bit).
    const __m512i choose = _mm512_slli_epi16(k[v], 9);
    k[v] = _mm512_shldi_epi16(k[v], _mm512_ternarylogic_epi32(choose, hi, lo, 0xCA), 1);
  }
}

// Byte c[i] of a 256-byte plane, 64 lanes (high: the codes' top bits).
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline __m512i PlaneBytes(
    const uint8_t* plane, __m512i c, __mmask64 high) {
  const __m512i lo =
      _mm512_permutex2var_epi8(_mm512_load_si512(plane), c, _mm512_load_si512(plane + 64));
  const __m512i hi =
      _mm512_permutex2var_epi8(_mm512_load_si512(plane + 128), c, _mm512_load_si512(plane + 192));
  return _mm512_mask_blend_epi8(high, lo, hi);
}

struct Dwords4 {
  __m512i r0, r1, r2, r3;
};

// The dwords of 64 entries of a table of byte planes, the codes already in
// code_order: byte b of each entry is looked up in plane b (two vpermi2b
// over its halves, the code's top bit choosing), and the four byte vectors
// are interleaved into dwords. The interleave (unpacks within each 128-bit
// lane) leaves entry r * 16 + 4 * lane + e in register r; code_order is
// that transposition of 4-entry groups (an involution), so the four
// registers come out in the codes' natural order.
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline Dwords4 LookupOrdered64(
    const uint8_t (*plane)[256], __m512i c) {
  const __mmask64 high = _mm512_movepi8_mask(c);
  const __m512i b0 = PlaneBytes(plane[0], c, high), b1 = PlaneBytes(plane[1], c, high);
  const __m512i b2 = PlaneBytes(plane[2], c, high), b3 = PlaneBytes(plane[3], c, high);
  const __m512i lo01 = _mm512_unpacklo_epi8(b0, b1), hi01 = _mm512_unpackhi_epi8(b0, b1);
  const __m512i lo23 = _mm512_unpacklo_epi8(b2, b3), hi23 = _mm512_unpackhi_epi8(b2, b3);
  return {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
          _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
}

// The same for 64 codes in their natural order.
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline Dwords4 Lookup64(
    const uint8_t (*plane)[256], const uint8_t* code_order, __m512i codes) {
  return LookupOrdered64(plane, _mm512_permutexvar_epi8(_mm512_load_si512(code_order), codes));
}

// 32 values x * inv: the two f32 vectors, and their ordered keys' high halves
// in one vector of words.
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline __m512i Halves32(const float* x,
                                                                                    __m512 inv,
                                                                                    __m512* v0,
                                                                                    __m512* v1) {
  // Word i of the result is word 2i + 1 (a dword's high half) of v0:v1.
  alignas(64) static constexpr int16_t kHighWords[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                                         23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                                         45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  *v0 = _mm512_mul_ps(_mm512_loadu_ps(x), inv);
  *v1 = _mm512_mul_ps(_mm512_loadu_ps(x + 16), inv);
  const __m512i h = _mm512_permutex2var_epi16(
      _mm512_castps_si512(*v0), _mm512_load_si512(kHighWords), _mm512_castps_si512(*v1));
  // The ordered key's high half: h ^ (sign mask & 0x7FFF) (vpternlogd's
  // table 0x78 is A ^ (B & C)).
  return _mm512_ternarylogic_epi32(h, _mm512_srai_epi16(h, 15), _mm512_set1_epi16(0x7FFF), 0x78);
}

// The codes of 64 values v[0..3] (16 each) from their searches' k0, k1.
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline void Finish64(
    const PermuteTables& pt, __m512i k0, __m512i k1, const __m512* v, uint8_t* codes) {
  const __m512i below = _mm512_permutex2var_epi8(k0, _mm512_load_si512(pt.low_bytes), k1);
  const Dwords4 next = LookupOrdered64(
      pt.threshold_plane,
      _mm512_permutex2var_epi8(k0, _mm512_load_si512(pt.low_bytes_in_code_order), k1));
  const __mmask64 above = _mm512_kunpackd(
      _mm512_kunpackw(_mm512_cmp_ps_mask(v[3], _mm512_castsi512_ps(next.r3), _CMP_GT_OQ),
                      _mm512_cmp_ps_mask(v[2], _mm512_castsi512_ps(next.r2), _CMP_GT_OQ)),
      _mm512_kunpackw(_mm512_cmp_ps_mask(v[1], _mm512_castsi512_ps(next.r1), _CMP_GT_OQ),
                      _mm512_cmp_ps_mask(v[0], _mm512_castsi512_ps(next.r0), _CMP_GT_OQ)));
  _mm512_storeu_si512(codes, _mm512_mask_add_epi8(below, above, below, _mm512_set1_epi8(1)));
}

// The codes of GA x 64 finite values xa * inv_a of map a (tree ta) and
// GB x 64 of map b (GB may be 0; inv finite), all the searches interleaved.
template <int GA, int GB>
__attribute__((target(AMPD_QUANT_VBMI_ISA), always_inline)) inline void CodeRuns(
    const PermuteTables& pa, const Tree& ta, const float* xa, __m512 inv_a, uint8_t* codes_a,
    const PermuteTables& pb, const Tree& tb, const float* xb, __m512 inv_b, uint8_t* codes_b) {
  constexpr int kA = 2 * GA, kHalves = 2 * (GA + GB);  // 32-value vectors
  __m512 v[2 * kHalves];
  __m512i half[kHalves], k[kHalves];
  for (int h = 0; h < kHalves; ++h) {
    const bool a = h < kA;
    half[h] =
        Halves32(a ? xa + 32 * h : xb + 32 * (h - kA), a ? inv_a : inv_b, &v[2 * h], &v[2 * h + 1]);
  }
  SearchHalves<kHalves, kA>(ta, tb, half, k);
  for (int g = 0; g < GA + GB; ++g) {
    const bool a = g < GA;
    Finish64(a ? pa : pb, k[2 * g], k[2 * g + 1], v + 4 * g,
             a ? codes_a + 64 * g : codes_b + 64 * (g - GA));
  }
}

#endif  // AMPD_QUANT_X86

}  // namespace ampd::engine::cpu::vbmi

#endif  // AMPD_ENGINE_CPU_QUANT_VBMI_H_
