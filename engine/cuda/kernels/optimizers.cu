// The fused optimizer steps (SGD, AdamW with torch.optim semantics): f32
// math, an optional skip on found_inf and an optional rounded model copy in
// the same pass.

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

__global__ void SgdStepKernel(void* param, int pdt, const void* grad, int gdt, float* momentum,
                              int64_t n, SgdArgs a, const float* found_inf, void* model_copy,
                              int mdt) {
  if (found_inf && *found_inf != 0.0f) return;  // skipped step: nothing changes
  GRID_STRIDE(i, n) {
    const float p = Load<float>(param, pdt, i);
    float d = Load<float>(grad, gdt, i) + a.weight_decay * p;
    if (momentum) {
      momentum[i] = a.first ? d : a.momentum * momentum[i] + d;
      d = a.nesterov ? d + a.momentum * momentum[i] : momentum[i];
    }
    const float out = p - a.lr * d;
    Store<float>(param, pdt, i, out);
    if (model_copy) Store<float>(model_copy, mdt, i, Load<float>(param, pdt, i));
  }
}

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
  GRID_STRIDE(i, n) {
    const float g = Load<float>(grad, gdt, i);
    m[i] = a.beta1 * m[i] + one_minus_beta1 * g;
    v[i] = a.beta2 * v[i] + one_minus_beta2 * g * g;
    const float denom = sqrtf(v[i]) / bc2_sqrt + a.eps;
    Store<float>(param, pdt, i, Load<float>(param, pdt, i) * decay - step_size * m[i] / denom);
    if (model_copy) Store<float>(model_copy, mdt, i, Load<float>(param, pdt, i));
  }
}

}  // namespace

std::string LaunchSgdStep(void* param, int pdt, const void* grad, int gdt, float* momentum,
                          int64_t n, const SgdArgs& a, const float* found_inf, void* model_copy,
                          int mdt, Stream s) {
  if (n == 0) return "";
  LAUNCH(SgdStepKernel, Blocks(n), kThreads, S(s), param, pdt, grad, gdt, momentum, n, a, found_inf,
         model_copy, mdt);
  return Check("SgdStepKernel");
}

std::string LaunchAdamWStep(void* param, int pdt, const void* grad, int gdt, float* exp_avg,
                            float* exp_avg_sq, int64_t n, const AdamWArgs& a, const float* step_ptr,
                            const float* found_inf, void* model_copy, int mdt, Stream s) {
  if (n == 0) return "";
  LAUNCH(AdamWStepKernel, Blocks(n), kThreads, S(s), param, pdt, grad, gdt, exp_avg, exp_avg_sq, n,
         a, step_ptr, found_inf, model_copy, mdt);
  return Check("AdamWStepKernel");
}

}  // namespace ampd::engine::cuda
