#include "engine/cpu/blockwise_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/backend/quant_map.h"
#include "engine/cpu/avx512_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
// As in core/half.cc: GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized
// on their own placeholders; silenced across the include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define AMPD_QUANT_X86 1
#endif

namespace ampd::engine::cpu {
namespace {

using backend::CodeTable;
using backend::CodeTableFor;
using backend::kQuantBlock;

// The permute coders' tables of one map (PermuteTablesFor).
struct PermuteTables {
  // The 255 decision thresholds (CodeTable::threshold) as an implicit binary
  // search tree: node k (1..255) at depth d = floor(log2 k), j = k - 2^d,
  // splits at threshold[(2j + 1) * 2^(7 - d) - 1]; children 2k and 2k + 1.
  // Slot 0 is unused.
  alignas(64) float node[256];
  // plane[b][c] = byte b (little-endian) of map[c]'s bits.
  alignas(64) uint8_t plane[4][256];
  // The order DequantizeBlockVbmi permutes 64 codes into (see there).
  alignas(64) uint8_t code_order[64];
};

const PermuteTables* BuildPermuteTables(const std::array<float, 256>& map) {
  const CodeTable* table = CodeTableFor(map);
  if (table == nullptr) return nullptr;
  auto* t = new PermuteTables;
  t->node[0] = 0;
  for (int k = 1; k < 256; ++k) {
    int depth = 0;
    while ((k >> (depth + 1)) != 0) ++depth;
    const int j = k - (1 << depth);
    t->node[k] = table->threshold[((2 * j + 1) << (7 - depth)) - 1];
  }
  for (int c = 0; c < 256; ++c) {
    uint32_t bits;
    std::memcpy(&bits, &map[c], 4);
    for (int b = 0; b < 4; ++b) t->plane[b][c] = static_cast<uint8_t>(bits >> (8 * b));
  }
  for (int p = 0; p < 64; ++p) {
    t->code_order[p] = static_cast<uint8_t>(((p >> 2) & 3) * 16 + (p >> 4) * 4 + (p & 3));
  }
  return t;
}

// The tables of DynamicMap() or UnsignedDynamicMap(); null for other maps.
const PermuteTables* PermuteTablesFor(const std::array<float, 256>& map) {
  static const PermuteTables* signed_tables = BuildPermuteTables(backend::DynamicMap());
  static const PermuteTables* unsigned_tables = BuildPermuteTables(backend::UnsignedDynamicMap());
  if (&map == &backend::DynamicMap()) return signed_tables;
  if (&map == &backend::UnsignedDynamicMap()) return unsigned_tables;
  return nullptr;
}

#ifdef AMPD_QUANT_X86
// max |x| over a block of len values.
__attribute__((target("avx512f"))) float BlockAbsmaxAvx512(const float* x, int64_t len) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  }
  float m = _mm512_reduce_max_ps(vmax);
  for (; i < len; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// One block of up to kQuantBlock values, 16 lanes at a time: the absmax,
// then each code from one gather of the bucket's packed entry (CodeTable).
// x * (1 / absmax) is computed as the scalar path does.
__attribute__((target("avx512f"))) void QuantizeBlockAvx512(const CodeTable& t, const float* x,
                                                            int64_t len, uint8_t* codes,
                                                            float* absmax) {
  const float m = *absmax = BlockAbsmaxAvx512(x, len);
  int64_t i = 0;
  if (m == 0) {
    std::fill_n(codes, len, t.Code(0.0f));
    return;
  }
  const float inv = 1.0f / m;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  const int* entry = reinterpret_cast<const int*>(t.entry.data());
  for (i = 0; i + 16 <= len; i += 16) {
    const __m512i bits = _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv));
    const __m512i e = _mm512_i32gather_epi32(_mm512_srli_epi32(bits, 16), entry, 4);
    // CodeTable::Low16: negative lanes' low bits complemented.
    const __m512i low = _mm512_xor_si512(_mm512_and_si512(bits, low16),
                                         _mm512_and_si512(_mm512_srai_epi32(bits, 31), low16));
    const __mmask16 up = _mm512_cmpgt_epi32_mask(low, _mm512_and_si512(e, low16));
    const __m512i start = _mm512_srli_epi32(e, 16);
    const __m512i c = _mm512_mask_add_epi32(start, up, start, _mm512_set1_epi32(1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(c));
  }
  for (; i < len; ++i) codes[i] = t.Code(x[i] * inv);
}

__attribute__((target("avx512f"))) void DequantizeBlockAvx512(const std::array<float, 256>& map,
                                                              const uint8_t* codes, float absmax,
                                                              int64_t len, float* x) {
  const __m512 a = _mm512_set1_ps(absmax);
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m512i c =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_i32gather_ps(c, map.data(), 4), a));
  }
  for (; i < len; ++i) x[i] = map[codes[i]] * absmax;
}

// The same lookup, 8 lanes at a time with AVX2's gathers (every x86-64
// CPU of the last decade, AMD's included, which often lack AVX-512).
__attribute__((target("avx2"))) void QuantizeBlockAvx2(const CodeTable& t, const float* x,
                                                       int64_t len, uint8_t* codes, float* absmax) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  float m = _mm_cvtss_f32(m4);
  for (; i < len; ++i) m = std::max(m, std::fabs(x[i]));
  *absmax = m;
  if (m == 0) {
    std::fill_n(codes, len, t.Code(0.0f));
    return;
  }
  const float inv = 1.0f / m;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i low16 = _mm256_set1_epi32(0xFFFF);
  const int* entry = reinterpret_cast<const int*>(t.entry.data());
  for (i = 0; i + 8 <= len; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    const __m256i e = _mm256_i32gather_epi32(entry, _mm256_srli_epi32(bits, 16), 4);
    const __m256i low = _mm256_xor_si256(_mm256_and_si256(bits, low16),
                                         _mm256_and_si256(_mm256_srai_epi32(bits, 31), low16));
    // The comparison's all-ones lanes are -1: subtracting them adds the 1.
    const __m256i up = _mm256_cmpgt_epi32(low, _mm256_and_si256(e, low16));
    const __m256i c = _mm256_sub_epi32(_mm256_srli_epi32(e, 16), up);
    const __m128i words =
        _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm_packus_epi16(words, words));
  }
  for (; i < len; ++i) codes[i] = t.Code(x[i] * inv);
}

__attribute__((target("avx2"))) void DequantizeBlockAvx2(const std::array<float, 256>& map,
                                                         const uint8_t* codes, float absmax,
                                                         int64_t len, float* x) {
  const __m256 a = _mm256_set1_ps(absmax);
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256i c =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_i32gather_ps(map.data(), c, 4), a));
  }
  for (; i < len; ++i) x[i] = map[codes[i]] * absmax;
}

// The codes of N x 16 values: eight levels of the search tree, each a
// compare with the lanes' node thresholds, fetched by permutes from
// registers (depth 0: a broadcast; 1-3: one 16-entry table; 4: another; 5:
// 32 entries; 6: 64; 7: 128). A lane goes right when x > threshold, so it
// ends at 256 + the number of thresholds below x: the nearest code, ties to
// the smaller (NearestCode); a NaN lane compares false throughout and gets
// code 0. The N searches are independent and interleaved, level by level:
// one search is a chain of eight permute-compare-add latencies, and a whole
// quantization block (N = 16) in flight hides them (on Zen 5: 0.55 ns a
// value with N = 4, as the gathers; 0.38 with 8; 0.33 with 16).
//
// Descend: k = 2k + (x > threshold), one level.
__attribute__((target("avx512f"), always_inline)) inline __m512i Descend(__m512i k, __m512 x,
                                                                         __m512 threshold) {
  const __m512i twice = _mm512_add_epi32(k, k);
  return _mm512_mask_add_epi32(twice, _mm512_cmp_ps_mask(x, threshold, _CMP_GT_OQ), twice,
                               _mm512_set1_epi32(1));
}

template <int N>
__attribute__((target("avx512f"), always_inline)) inline void SearchCodes(const float* node,
                                                                          const __m512* x,
                                                                          __m512i* k) {
  const __m512 root = _mm512_set1_ps(node[1]);
  const __m512 top = _mm512_load_ps(node);  // nodes 1..15
#pragma GCC unroll 16
  for (int v = 0; v < N; ++v) k[v] = Descend(_mm512_set1_epi32(1), x[v], root);
#pragma GCC unroll 3
  for (int depth = 1; depth < 4; ++depth) {
#pragma GCC unroll 16
    for (int v = 0; v < N; ++v) k[v] = Descend(k[v], x[v], _mm512_permutexvar_ps(k[v], top));
  }
  const __m512 t16 = _mm512_load_ps(node + 16);  // k in 16..31: low 4 bits
#pragma GCC unroll 16
  for (int v = 0; v < N; ++v) k[v] = Descend(k[v], x[v], _mm512_permutexvar_ps(k[v], t16));
  const __m512 t32 = _mm512_load_ps(node + 32), t48 = _mm512_load_ps(node + 48);
#pragma GCC unroll 16
  for (int v = 0; v < N; ++v) {  // k in 32..63: low 5 bits
    k[v] = Descend(k[v], x[v], _mm512_permutex2var_ps(t32, k[v], t48));
  }
  const __m512i bit5 = _mm512_set1_epi32(32), bit6 = _mm512_set1_epi32(64);
#pragma GCC unroll 16
  for (int v = 0; v < N; ++v) {  // k in 64..127: bit 5 picks the half
    const __m512 a =
        _mm512_permutex2var_ps(_mm512_load_ps(node + 64), k[v], _mm512_load_ps(node + 80));
    const __m512 b =
        _mm512_permutex2var_ps(_mm512_load_ps(node + 96), k[v], _mm512_load_ps(node + 112));
    k[v] = Descend(k[v], x[v], _mm512_mask_blend_ps(_mm512_test_epi32_mask(k[v], bit5), a, b));
  }
#pragma GCC unroll 16
  for (int v = 0; v < N; ++v) {  // k in 128..255: bits 5 and 6 pick the quarter
    const __m512 a0 =
        _mm512_permutex2var_ps(_mm512_load_ps(node + 128), k[v], _mm512_load_ps(node + 144));
    const __m512 a1 =
        _mm512_permutex2var_ps(_mm512_load_ps(node + 160), k[v], _mm512_load_ps(node + 176));
    const __m512 a2 =
        _mm512_permutex2var_ps(_mm512_load_ps(node + 192), k[v], _mm512_load_ps(node + 208));
    const __m512 a3 =
        _mm512_permutex2var_ps(_mm512_load_ps(node + 224), k[v], _mm512_load_ps(node + 240));
    const __mmask16 b5 = _mm512_test_epi32_mask(k[v], bit5);
    const __mmask16 b6 = _mm512_test_epi32_mask(k[v], bit6);
    k[v] = Descend(k[v], x[v],
                   _mm512_mask_blend_ps(b6, _mm512_mask_blend_ps(b5, a0, a1),
                                        _mm512_mask_blend_ps(b5, a2, a3)));
  }
  // k[v] = 256 + code: the low byte is the code
}

// One block by the search: the absmax as QuantizeBlockAvx512 takes it, then
// the codes of a whole block in one interleaved search (a partial block: 16
// at a time). A block whose 1 / absmax overflows (absmax below
// 2^-128) takes the table's codes, as the reference does.
__attribute__((target("avx512f"))) void QuantizeBlockSearch(const CodeTable& t,
                                                            const PermuteTables& pt, const float* x,
                                                            int64_t len, uint8_t* codes,
                                                            float* absmax) {
  const float m = *absmax = BlockAbsmaxAvx512(x, len);
  int64_t i = 0;
  if (m == 0) {
    std::fill_n(codes, len, t.Code(0.0f));
    return;
  }
  const float inv = 1.0f / m;
  if (!(inv <= std::numeric_limits<float>::max())) {
    for (i = 0; i < len; ++i) codes[i] = t.Code(x[i] * inv);
    return;
  }
  const __m512 vinv = _mm512_set1_ps(inv);
  for (i = 0; i + 256 <= len; i += 256) {
    __m512 v[16];
    __m512i k[16];
    for (int r = 0; r < 16; ++r) v[r] = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16 * r), vinv);
    SearchCodes<16>(pt.node, v, k);
    for (int r = 0; r < 16; ++r) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i + 16 * r), _mm512_cvtepi32_epi8(k[r]));
    }
  }
  for (; i < len; i += 16) {
    const __mmask16 rest = FirstLanes(len - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(rest, x + i), vinv);
    __m512i k;
    SearchCodes<1>(pt.node, &v, &k);
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, rest, k);
  }
}

// 64 values from 64 codes: byte b of each value is looked up in plane b (two
// vpermi2b over its halves, the code's top bit choosing), and the four byte
// vectors are interleaved into dwords. The interleave (unpacks within each
// 128-bit lane) leaves value r * 16 + 4 * lane + e in register r, so the
// codes are first permuted by that transposition of 4-value groups (an
// involution), and the four registers come out in order.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void DequantizeBlockVbmi(
    const PermuteTables& t, const uint8_t* codes, float absmax, int64_t len, float* x) {
  const __m512i perm = _mm512_load_si512(t.code_order);
  const __m512 a = _mm512_set1_ps(absmax);
  int64_t i = 0;
  for (; i + 64 <= len; i += 64) {
    const __m512i c = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(codes + i));
    const __mmask64 high = _mm512_movepi8_mask(c);
    __m512i byte[4];
    for (int b = 0; b < 4; ++b) {
      const uint8_t* plane = t.plane[b];
      const __m512i lo =
          _mm512_permutex2var_epi8(_mm512_load_si512(plane), c, _mm512_load_si512(plane + 64));
      const __m512i hi = _mm512_permutex2var_epi8(_mm512_load_si512(plane + 128), c,
                                                  _mm512_load_si512(plane + 192));
      byte[b] = _mm512_mask_blend_epi8(high, lo, hi);
    }
    const __m512i lo01 = _mm512_unpacklo_epi8(byte[0], byte[1]);
    const __m512i hi01 = _mm512_unpackhi_epi8(byte[0], byte[1]);
    const __m512i lo23 = _mm512_unpacklo_epi8(byte[2], byte[3]);
    const __m512i hi23 = _mm512_unpackhi_epi8(byte[2], byte[3]);
    const __m512i value[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                              _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
    for (int r = 0; r < 4; ++r) {
      _mm512_storeu_ps(x + i + 16 * r, _mm512_mul_ps(_mm512_castsi512_ps(value[r]), a));
    }
  }
  for (; i < len; ++i) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; ++b) bits |= uint32_t{t.plane[b][codes[i]]} << (8 * b);
    float v;
    std::memcpy(&v, &bits, 4);
    x[i] = v * absmax;
  }
}

#else
void QuantizeBlockSearch(const CodeTable&, const PermuteTables&, const float*, int64_t, uint8_t*,
                         float*) {}
void DequantizeBlockVbmi(const PermuteTables&, const uint8_t*, float, int64_t, float*) {}
void QuantizeBlockAvx512(const CodeTable&, const float*, int64_t, uint8_t*, float*) {}
void DequantizeBlockAvx512(const std::array<float, 256>&, const uint8_t*, float, int64_t, float*) {}
void QuantizeBlockAvx2(const CodeTable&, const float*, int64_t, uint8_t*, float*) {}
void DequantizeBlockAvx2(const std::array<float, 256>&, const uint8_t*, float, int64_t, float*) {}
#endif

// The path that runs: kBest is the widest this CPU has; a path it lacks (or
// a map without a code table, for quantizing) falls back to the scalar one.
QuantPath Resolve(QuantPath path) {
  if (path == QuantPath::kBest) {
    if (HasQuantPath(QuantPath::kAvx512Vbmi)) return QuantPath::kAvx512Vbmi;
    if (HasQuantPath(QuantPath::kAvx512)) return QuantPath::kAvx512;
    if (HasQuantPath(QuantPath::kAvx2)) return QuantPath::kAvx2;
    return QuantPath::kScalar;
  }
  return HasQuantPath(path) ? path : QuantPath::kScalar;
}

}  // namespace

bool HasQuantPath(QuantPath path) {
#ifdef AMPD_QUANT_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool vbmi =
      avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi");
  switch (path) {
    case QuantPath::kAvx512Vbmi:
      return vbmi;
    case QuantPath::kAvx512:
      return avx512;
    case QuantPath::kAvx2:
      return avx2;
    default:
      return true;
  }
#else
  return path == QuantPath::kScalar || path == QuantPath::kBest;
#endif
}

const char* QuantPathName(QuantPath path) {
  switch (Resolve(path)) {
    case QuantPath::kAvx512Vbmi:
      return "avx512-vbmi";
    case QuantPath::kAvx512:
      return "avx512";
    case QuantPath::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

void QuantizeBlocks(const std::array<float, 256>& map, const float* x, int64_t n, uint8_t* codes,
                    float* absmax, QuantPath path) {
  const CodeTable* table = CodeTableFor(map);
  const QuantPath use = Resolve(path);
  if (table == nullptr || use == QuantPath::kScalar) {
    backend::QuantizeBlockwise(map, x, n, codes, absmax);
    return;
  }
  if (use == QuantPath::kAvx512Vbmi) {
    const PermuteTables* pt = PermuteTablesFor(map);
    for (int64_t b = 0; b * kQuantBlock < n; ++b) {
      const int64_t begin = b * kQuantBlock;
      QuantizeBlockSearch(*table, *pt, x + begin, std::min(kQuantBlock, n - begin), codes + begin,
                          absmax + b);
    }
    return;
  }
  auto* block = use == QuantPath::kAvx512 ? &QuantizeBlockAvx512 : &QuantizeBlockAvx2;
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    const int64_t begin = b * kQuantBlock;
    block(*table, x + begin, std::min(kQuantBlock, n - begin), codes + begin, absmax + b);
  }
}

void DequantizeBlocks(const std::array<float, 256>& map, const uint8_t* codes, const float* absmax,
                      int64_t n, float* x, QuantPath path) {
  QuantPath use = Resolve(path);
  const PermuteTables* pt = use == QuantPath::kAvx512Vbmi ? PermuteTablesFor(map) : nullptr;
  if (use == QuantPath::kAvx512Vbmi && pt == nullptr) use = QuantPath::kAvx512;  // another map
  if (use == QuantPath::kScalar) {
    backend::DequantizeBlockwise(map, codes, absmax, n, x);
    return;
  }
  if (use == QuantPath::kAvx512Vbmi) {
    for (int64_t b = 0; b * kQuantBlock < n; ++b) {
      const int64_t begin = b * kQuantBlock;
      DequantizeBlockVbmi(*pt, codes + begin, absmax[b], std::min(kQuantBlock, n - begin),
                          x + begin);
    }
    return;
  }
  auto* block = use == QuantPath::kAvx512 ? &DequantizeBlockAvx512 : &DequantizeBlockAvx2;
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    const int64_t begin = b * kQuantBlock;
    block(map, codes + begin, absmax[b], std::min(kQuantBlock, n - begin), x + begin);
  }
}

}  // namespace ampd::engine::cpu
