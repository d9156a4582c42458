#include "engine/cpu/blockwise_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "engine/backend/quant_map.h"
#include "engine/cpu/avx512_math.h"
#include "engine/cpu/quant_vbmi.h"

namespace ampd::engine::cpu {
namespace {

using backend::CodeTable;
using backend::CodeTableFor;
using backend::kQuantBlock;
using vbmi::OrderedKey;
using vbmi::PermuteTables;
using vbmi::PermuteTablesFor;

const PermuteTables* BuildPermuteTables(const std::array<float, 256>& map) {
  const CodeTable* table = CodeTableFor(map);
  if (table == nullptr) return nullptr;
  auto t = std::make_unique<PermuteTables>();
  int32_t key[256];
  for (int c = 0; c < 255; ++c) {
    if (table->threshold[c] == 0.0f) return nullptr;  // -0 and +0 would compare apart
    key[c] = OrderedKey(table->threshold[c]);
    if (c > 0 && (key[c] >> 16) <= (key[c - 1] >> 16)) return nullptr;
  }
  t->node[0] = 0;
  for (int k = 1; k < 256; ++k) {
    int depth = 0;
    while ((k >> (depth + 1)) != 0) ++depth;
    const int j = k - (1 << depth);
    t->node[k] = static_cast<int16_t>(key[((2 * j + 1) << (7 - depth)) - 1] >> 16);
  }
  for (int c = 0; c < 256; ++c) {
    uint32_t bits, threshold_bits;
    std::memcpy(&bits, &map[c], 4);
    std::memcpy(&threshold_bits, &table->threshold[c], 4);  // threshold[255] = +inf
    for (int b = 0; b < 4; ++b) {
      t->plane[b][c] = static_cast<uint8_t>(bits >> (8 * b));
      t->threshold_plane[b][c] = static_cast<uint8_t>(threshold_bits >> (8 * b));
    }
  }
  for (int p = 0; p < 64; ++p) {
    t->code_order[p] = static_cast<uint8_t>(((p >> 2) & 3) * 16 + (p >> 4) * 4 + (p & 3));
    t->low_bytes[p] = static_cast<uint8_t>(2 * p);
    t->low_bytes_in_code_order[p] = static_cast<uint8_t>(2 * t->code_order[p]);
  }
  return t.release();
}

#ifdef AMPD_QUANT_X86
// max |x| over a block of len values; *finite (when given) = no NaN or
// infinity among them (x * 0 + sum is NaN once one was).
__attribute__((target("avx512f"))) float BlockAbsmaxAvx512(const float* x, int64_t len,
                                                           bool* finite = nullptr) {
  __m512 vmax = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    // vmaxps returns its second operand when either is NaN: a NaN value is
    // dropped, as the reference's std::max(m, |x|) drops it.
    vmax = _mm512_max_ps(_mm512_abs_ps(v), vmax);
    odd = _mm512_fmadd_ps(v, _mm512_setzero_ps(), odd);
  }
  float m = _mm512_reduce_max_ps(vmax);
  bool ok = _mm512_cmp_ps_mask(odd, odd, _CMP_UNORD_Q) == 0;
  for (; i < len; ++i) {
    m = std::max(m, std::fabs(x[i]));
    ok = ok && std::isfinite(x[i]);
  }
  if (finite != nullptr) *finite = ok;
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
    vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), vmax);  // NaN dropped
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

// One block by the search: the absmax as QuantizeBlockAvx512 takes it, then
// the codes of a whole block in one interleaved search (CodeRuns), a partial
// one 64 at a time, a tail of fewer than 64 by the table. A block with a NaN
// or an infinity, or whose 1 / absmax overflows (absmax below 2^-128), takes
// the table's codes throughout, as the reference does.
__attribute__((target(AMPD_QUANT_VBMI_ISA))) void QuantizeBlockSearch(const CodeTable& t,
                                                                      const PermuteTables& pt,
                                                                      const float* x, int64_t len,
                                                                      uint8_t* codes,
                                                                      float* absmax) {
  bool finite;
  const float m = *absmax = BlockAbsmaxAvx512(x, len, &finite);
  if (m == 0) {
    std::fill_n(codes, len, t.Code(0.0f));
    return;
  }
  const float inv = 1.0f / m;
  int64_t i = 0;
  if (!finite || !(inv <= std::numeric_limits<float>::max())) {
    for (; i < len; ++i) codes[i] = t.Code(x[i] * inv);
    return;
  }
  const __m512 vinv = _mm512_set1_ps(inv);
  const vbmi::Tree tree = vbmi::LoadTree(pt.node);
  for (; i + 256 <= len; i += 256) {
    vbmi::CodeRuns<4, 0>(pt, tree, x + i, vinv, codes + i, pt, tree, nullptr, vinv, nullptr);
  }
  for (; i + 64 <= len; i += 64) {
    vbmi::CodeRuns<1, 0>(pt, tree, x + i, vinv, codes + i, pt, tree, nullptr, vinv, nullptr);
  }
  for (; i < len; ++i) codes[i] = t.Code(x[i] * inv);
}

// 64 values at a time from their codes' byte planes (Lookup64).
__attribute__((target(AMPD_QUANT_VBMI_ISA))) void DequantizeBlockVbmi(const PermuteTables& t,
                                                                      const uint8_t* codes,
                                                                      float absmax, int64_t len,
                                                                      float* x) {
  const __m512 a = _mm512_set1_ps(absmax);
  int64_t i = 0;
  for (; i + 64 <= len; i += 64) {
    const vbmi::Dwords4 v = vbmi::Lookup64(t.plane, t.code_order, _mm512_loadu_si512(codes + i));
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_castsi512_ps(v.r0), a));
    _mm512_storeu_ps(x + i + 16, _mm512_mul_ps(_mm512_castsi512_ps(v.r1), a));
    _mm512_storeu_ps(x + i + 32, _mm512_mul_ps(_mm512_castsi512_ps(v.r2), a));
    _mm512_storeu_ps(x + i + 48, _mm512_mul_ps(_mm512_castsi512_ps(v.r3), a));
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

const PermuteTables* vbmi::PermuteTablesFor(const std::array<float, 256>& map) {
  static const PermuteTables* signed_tables = BuildPermuteTables(backend::DynamicMap());
  static const PermuteTables* unsigned_tables = BuildPermuteTables(backend::UnsignedDynamicMap());
  if (&map == &backend::DynamicMap()) return signed_tables;
  if (&map == &backend::UnsignedDynamicMap()) return unsigned_tables;
  return nullptr;
}

bool HasQuantPath(QuantPath path) {
#ifdef AMPD_QUANT_X86
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool has_vbmi =
      avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
  switch (path) {
    case QuantPath::kAvx512Vbmi:
      return has_vbmi;
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
  const PermuteTables* pt = use == QuantPath::kAvx512Vbmi ? PermuteTablesFor(map) : nullptr;
  if (pt != nullptr) {
    for (int64_t b = 0; b * kQuantBlock < n; ++b) {
      const int64_t begin = b * kQuantBlock;
      QuantizeBlockSearch(*table, *pt, x + begin, std::min(kQuantBlock, n - begin), codes + begin,
                          absmax + b);
    }
    return;
  }
  auto* block = use == QuantPath::kAvx2 ? &QuantizeBlockAvx2 : &QuantizeBlockAvx512;
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
