// The CPU backend: AMP unscale with the non-finite check, and the SGD / AdamW updates (torch.optim
// semantics).

#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/optimizer_math.h"

namespace ampd::engine::cpu {

using backend::NonFiniteCheck;

NonFiniteCheck CpuBackendImpl::UnscaleAndCheck(const std::vector<Tensor>& grads, float inv_scale) {
  NonFiniteCheck check;
  for (size_t t = 0; t < grads.size(); ++t) {
    const Tensor& g = grads[t];
    bool bad = false;
    if (UsesDouble(g)) {
      std::vector<float> v = g.ToFloats();
      for (float& f : v) {
        f *= inv_scale;
        bad |= !std::isfinite(f);
      }
      g.CopyFrom(Tensor::FromVector(v, g.shape(), DType::kF32));
    } else {
      // Multiplied in f32, checked before rounding back to g's dtype.
      const int64_t n = g.numel();
      const int64_t blocks = (n + kBlock - 1) / kBlock;
      std::vector<char> block_bad(blocks, 0);
      ParallelFor(blocks, n >= kParallelMin, [&](int64_t b) {
        const int64_t begin = b * kBlock, len = std::min(kBlock, n - begin);
        float buf[kBlock];
        const float* in = LoadBlock(g, begin, len, buf);
        float* out = DestBlock(g, begin, buf);
        int any = 0;
#ifdef _OPENMP
#pragma omp simd reduction(| : any)
#endif
        for (int64_t i = 0; i < len; ++i) {
          out[i] = in[i] * inv_scale;
          // !isfinite, written so that it vectorises (NaN compares false).
          any |= !(std::fabs(out[i]) <= std::numeric_limits<float>::max());
        }
        StoreBlock(out, g, begin, len);
        block_bad[b] = any != 0;
      });
      bad = std::find(block_bad.begin(), block_bad.end(), 1) != block_bad.end();
    }
    if (bad && !check.found_inf) {
      check.found_inf = true;
      check.first_index = static_cast<int>(t);
    }
  }
  return check;
}

// Both updates write the parameter in place, a block at a time: each block
// is read before it is written, so the math (f32, one rounding to the param
// dtype) is that of computing a new tensor and copying it over.
void CpuBackendImpl::SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                             const SgdHyper& h, bool first) {
  float* mom = h.momentum != 0 ? momentum_buf.data<float>() : nullptr;
  ForBlocks(param.numel(), [&](int64_t begin, int64_t len) {
    float g_buf[kBlock], p_buf[kBlock];
    const float* __restrict gs = LoadBlock(grad, begin, len, g_buf);
    const float* ps = LoadBlock(param, begin, len, p_buf);
    float* out = DestBlock(param, begin, p_buf);  // element i read, then written
    if (mom == nullptr) {
      AMPD_SIMD
      for (int64_t i = 0; i < len; ++i) {
        const float d = gs[i] + h.weight_decay * ps[i];
        out[i] = ps[i] - h.lr * d;
      }
    } else {
      SgdMomentumBlock(h, first, gs, ps, mom + begin, out, len);
    }
    StoreBlock(out, param, begin, len);
  });
}

void CpuBackendImpl::AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                               const Tensor& exp_avg_sq, const AdamWHyper& h) {
  const AdamWBlockMath math(h);
  float* m_all = exp_avg.data<float>();
  float* v_all = exp_avg_sq.data<float>();
  ForBlocks(param.numel(), [&](int64_t begin, int64_t len) {
    float g_buf[kBlock], p_buf[kBlock];
    const float* gs = LoadBlock(grad, begin, len, g_buf);
    const float* ps = LoadBlock(param, begin, len, p_buf);
    float* out = DestBlock(param, begin, p_buf);  // element i read, then written
    math.Update(gs, ps, m_all + begin, v_all + begin, out, len);
    StoreBlock(out, param, begin, len);
  });
}

}  // namespace ampd::engine::cpu
