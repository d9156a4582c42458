// The fused optimizer steps (SGD, AdamW with torch.optim semantics): f32
// math, an optional skip on found_inf and an optional rounded model copy in
// the same pass.

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

// W: 1, or kVec for 16-byte accesses where every buffer is Aligned16; the
// update of each value is the same either way.
template <int W>
__global__ void SgdStepKernel(void* param, int pdt, const void* grad, int gdt, float* momentum,
                              int64_t n, SgdArgs a, const float* found_inf, void* model_copy,
                              int mdt) {
  if (found_inf && *found_inf != 0.0f) return;  // skipped step: nothing changes
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    float p[w], d[w], mom[w] = {};
    LoadN(param, pdt, i, p);
    LoadN(grad, gdt, i, d);
    if (momentum && !a.first) LoadN(momentum, kF32, i, mom);
#pragma unroll
    for (int k = 0; k < w; ++k) {
      d[k] += a.weight_decay * p[k];
      if (momentum) {
        mom[k] = a.first ? d[k] : a.momentum * mom[k] + d[k];
        d[k] = a.nesterov ? d[k] + a.momentum * mom[k] : mom[k];
      }
      p[k] = p[k] - a.lr * d[k];
    }
    if (momentum) StoreN(momentum, kF32, i, mom);
    StoreN(param, pdt, i, p);
    if (model_copy) {  // the stored parameter, rounded to the copy's dtype
      LoadN(param, pdt, i, p);
      StoreN(model_copy, mdt, i, p);
    }
  });
}

template <int W>
__global__ void AdamWStepKernel(void* param, int pdt, const void* grad, int gdt, float* m, float* v,
                                int64_t n, AdamWArgs a, const float* step_ptr,
                                const float* found_inf, void* model_copy, int mdt) {
  if (found_inf && *found_inf != 0.0f) return;
  const int64_t step = step_ptr ? static_cast<int64_t>(*step_ptr) + 1 : a.step;
  const double bc1 = 1.0 - pow(static_cast<double>(a.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - pow(static_cast<double>(a.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(a.lr / bc1);
  const float bc2_sqrt = static_cast<float>(sqrt(bc2));
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float one_minus_beta1 = 1.0f - a.beta1, one_minus_beta2 = 1.0f - a.beta2;
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    float p[w], g[w], mv[w], vv[w];
    LoadN(param, pdt, i, p);
    LoadN(grad, gdt, i, g);
    LoadN(m, kF32, i, mv);
    LoadN(v, kF32, i, vv);
#pragma unroll
    for (int k = 0; k < w; ++k) {
      mv[k] = a.beta1 * mv[k] + one_minus_beta1 * g[k];
      vv[k] = a.beta2 * vv[k] + one_minus_beta2 * g[k] * g[k];
      const float denom = sqrtf(vv[k]) / bc2_sqrt + a.eps;
      p[k] = p[k] * decay - step_size * mv[k] / denom;
    }
    StoreN(m, kF32, i, mv);
    StoreN(v, kF32, i, vv);
    StoreN(param, pdt, i, p);
    if (model_copy) {  // the stored parameter, rounded to the copy's dtype
      LoadN(param, pdt, i, p);
      StoreN(model_copy, mdt, i, p);
    }
  });
}

}  // namespace

std::string LaunchSgdStep(void* param, int pdt, const void* grad, int gdt, float* momentum,
                          int64_t n, const SgdArgs& a, const float* found_inf, void* model_copy,
                          int mdt, Stream s) {
  if (n == 0) return "";
  if (Aligned16(param) && Aligned16(grad) && Aligned16(momentum) && Aligned16(model_copy)) {
    LAUNCH(SgdStepKernel<kVec>, Blocks((n + kVec - 1) / kVec), kThreads, S(s), param, pdt, grad,
           gdt, momentum, n, a, found_inf, model_copy, mdt);
  } else {
    LAUNCH(SgdStepKernel<1>, Blocks(n), kThreads, S(s), param, pdt, grad, gdt, momentum, n, a,
           found_inf, model_copy, mdt);
  }
  return Check("SgdStepKernel");
}

std::string LaunchAdamWStep(void* param, int pdt, const void* grad, int gdt, float* exp_avg,
                            float* exp_avg_sq, int64_t n, const AdamWArgs& a, const float* step_ptr,
                            const float* found_inf, void* model_copy, int mdt, Stream s) {
  if (n == 0) return "";
  if (Aligned16(param) && Aligned16(grad) && Aligned16(exp_avg) && Aligned16(exp_avg_sq) &&
      Aligned16(model_copy)) {
    LAUNCH(AdamWStepKernel<kVec>, Blocks((n + kVec - 1) / kVec), kThreads, S(s), param, pdt, grad,
           gdt, exp_avg, exp_avg_sq, n, a, step_ptr, found_inf, model_copy, mdt);
  } else {
    LAUNCH(AdamWStepKernel<1>, Blocks(n), kThreads, S(s), param, pdt, grad, gdt, exp_avg,
           exp_avg_sq, n, a, step_ptr, found_inf, model_copy, mdt);
  }
  return Check("AdamWStepKernel");
}

}  // namespace ampd::engine::cuda
