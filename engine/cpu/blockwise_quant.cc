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
// then code = start[top 16 bits] + (x > threshold[start]) as two gathers
// (CodeTable). x * (1 / absmax) is computed as the scalar path does.
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
  const __m512i low_byte = _mm512_set1_epi32(0xFF);
  for (i = 0; i + 16 <= len; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv);
    const __m512i key = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
    // 4-byte gathers of the byte table (it has 3 bytes of padding).
    __m512i c = _mm512_and_si512(_mm512_i32gather_epi32(key, t.start.data(), 1), low_byte);
    const __m512 thr = _mm512_i32gather_ps(c, t.threshold.data(), 4);
    const __mmask16 up = _mm512_cmp_ps_mask(v, thr, _CMP_GT_OQ);
    c = _mm512_mask_add_epi32(c, up, c, _mm512_set1_epi32(1));
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

#else
void QuantizeBlockAvx512(const CodeTable&, const float*, int64_t, uint8_t*, float*) {}
void DequantizeBlockAvx512(const std::array<float, 256>&, const uint8_t*, float, int64_t, float*) {}
#endif

bool UseAvx512(QuantPath path, const CodeTable* table) {
  if (path == QuantPath::kScalar) return false;
  return table != nullptr && HasAvx512Quant();
}

}  // namespace

bool HasAvx512Quant() {
#ifdef AMPD_QUANT_X86
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

void QuantizeBlocks(const std::array<float, 256>& map, const float* x, int64_t n, uint8_t* codes,
                    float* absmax, QuantPath path) {
  const CodeTable* table = CodeTableFor(map);
  if (!UseAvx512(path, table)) {
    backend::QuantizeBlockwise(map, x, n, codes, absmax);
    return;
  }
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    const int64_t begin = b * kQuantBlock;
    QuantizeBlockAvx512(*table, x + begin, std::min(kQuantBlock, n - begin), codes + begin,
                        absmax + b);
  }
}

void DequantizeBlocks(const std::array<float, 256>& map, const uint8_t* codes,
                      const float* absmax, int64_t n, float* x, QuantPath path) {
  if (path == QuantPath::kScalar || !HasAvx512Quant()) {
    backend::DequantizeBlockwise(map, codes, absmax, n, x);
    return;
  }
  for (int64_t b = 0; b * kQuantBlock < n; ++b) {
    const int64_t begin = b * kQuantBlock;
    DequantizeBlockAvx512(map, codes + begin, absmax[b], std::min(kQuantBlock, n - begin),
                          x + begin);
  }
}

}  // namespace ampd::engine::cpu
