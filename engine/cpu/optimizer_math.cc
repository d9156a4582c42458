#include "engine/cpu/optimizer_math.h"

namespace ampd::engine::cpu {

#ifdef AMPD_HAS_AVX512_KERNELS
// fp-contract=off: GCC would otherwise fuse the multiply-adds below into
// FMAs, which round once instead of twice and so differ from the portable
// loop (built for plain x86-64, without FMA).
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void AdamWBlockMath::UpdateAvx512(
    const float* gs, const float* ps, float* m, float* v, float* out, int64_t len) const {
  const __m512 beta1 = _mm512_set1_ps(beta1_), beta2 = _mm512_set1_ps(beta2_);
  const __m512 one_minus_beta1 = _mm512_set1_ps(one_minus_beta1_);
  const __m512 one_minus_beta2 = _mm512_set1_ps(one_minus_beta2_);
  const __m512 bc2_sqrt = _mm512_set1_ps(bc2_sqrt_), eps = _mm512_set1_ps(eps_);
  const __m512 decay = _mm512_set1_ps(decay_), step_size = _mm512_set1_ps(step_size_);
  for (int64_t i = 0; i < len; i += 16) {
    const __mmask16 lanes = FirstLanes(len - i);
    __m512 g, p, m0, v0;
    if (lanes == 0xFFFF) {
      g = _mm512_loadu_ps(gs + i);
      p = _mm512_loadu_ps(ps + i);
      m0 = _mm512_loadu_ps(m + i);
      v0 = _mm512_loadu_ps(v + i);
    } else {
      g = _mm512_maskz_loadu_ps(lanes, gs + i);
      p = _mm512_maskz_loadu_ps(lanes, ps + i);
      m0 = _mm512_maskz_loadu_ps(lanes, m + i);
      v0 = _mm512_maskz_loadu_ps(lanes, v + i);
    }
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(beta1, m0), _mm512_mul_ps(one_minus_beta1, g));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(beta2, v0),
                                    _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    __m512 pi;
    if (form_ == Form::kTorch) {
      const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2_sqrt), eps);
      pi = _mm512_sub_ps(_mm512_mul_ps(p, decay),
                         _mm512_div_ps(_mm512_mul_ps(step_size, mi), denom));
    } else {
      const __m512 ratio = _mm512_div_ps(mi, _mm512_add_ps(_mm512_sqrt_ps(vi), eps));
      pi = _mm512_sub_ps(_mm512_mul_ps(p, decay), _mm512_mul_ps(step_size, ratio));
    }
    if (lanes == 0xFFFF) {
      _mm512_storeu_ps(m + i, mi);
      _mm512_storeu_ps(v + i, vi);
      _mm512_storeu_ps(out + i, pi);
    } else {
      _mm512_mask_storeu_ps(m + i, lanes, mi);
      _mm512_mask_storeu_ps(v + i, lanes, vi);
      _mm512_mask_storeu_ps(out + i, lanes, pi);
    }
  }
}
#endif

}  // namespace ampd::engine::cpu
