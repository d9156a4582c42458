#include "engine/cpu/blockwise_quant.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/quant_map.h"

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

#ifdef AMPD_QUANT_X86
// One block of up to kQuantBlock values, 16 lanes at a time: the absmax,
// then each code from one gather of the bucket's packed entry (CodeTable).
// x * (1 / absmax) is computed as the scalar path does.
__attribute__((target("avx512f"))) void QuantizeBlockAvx512(const CodeTable& t, const float* x,
                                                            int64_t len, uint8_t* codes,
                                                            float* absmax) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  }
  float m = _mm512_reduce_max_ps(vmax);
  for (; i < len; ++i) m = std::max(m, std::fabs(x[i]));
  *absmax = m;
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

#else
void QuantizeBlockAvx512(const CodeTable&, const float*, int64_t, uint8_t*, float*) {}
void DequantizeBlockAvx512(const std::array<float, 256>&, const uint8_t*, float, int64_t, float*) {}
void QuantizeBlockAvx2(const CodeTable&, const float*, int64_t, uint8_t*, float*) {}
void DequantizeBlockAvx2(const std::array<float, 256>&, const uint8_t*, float, int64_t, float*) {}
#endif

// The path that runs: kBest is the widest this CPU has; a path it lacks (or
// a map without a code table, for quantizing) falls back to the scalar one.
QuantPath Resolve(QuantPath path) {
  if (path == QuantPath::kBest) {
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
  switch (path) {
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
  auto* block = use == QuantPath::kAvx512 ? &QuantizeBlockAvx512 : &QuantizeBlockAvx2;
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    const int64_t begin = b * kQuantBlock;
    block(*table, x + begin, std::min(kQuantBlock, n - begin), codes + begin, absmax + b);
  }
}

void DequantizeBlocks(const std::array<float, 256>& map, const uint8_t* codes, const float* absmax,
                      int64_t n, float* x, QuantPath path) {
  const QuantPath use = Resolve(path);
  if (use == QuantPath::kScalar) {
    backend::DequantizeBlockwise(map, codes, absmax, n, x);
    return;
  }
  auto* block = use == QuantPath::kAvx512 ? &DequantizeBlockAvx512 : &DequantizeBlockAvx2;
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    const int64_t begin = b * kQuantBlock;
    block(map, codes + begin, absmax[b], std::min(kQuantBlock, n - begin), x + begin);
  }
}

}  // namespace ampd::engine::cpu
