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

// AdamW's per-step constants (torch.optim's bias corrections, in f64 from
// the step count, rounded once to f32).
struct AdamWConstants {
  float step_size, bc2_sqrt, decay, one_minus_beta1, one_minus_beta2;
};

__device__ AdamWConstants AdamWConstantsFor(const AdamWArgs& a, const float* step_ptr,
                                            float weight_decay) {
  const int64_t step = step_ptr ? static_cast<int64_t>(*step_ptr) + 1 : a.step;
  const double bc1 = 1.0 - pow(static_cast<double>(a.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - pow(static_cast<double>(a.beta2), static_cast<double>(step));
  return {static_cast<float>(a.lr / bc1), static_cast<float>(sqrt(bc2)), 1.0f - a.lr * weight_decay,
          1.0f - a.beta1, 1.0f - a.beta2};
}

// One group of w values at i: the update, the states and parameter stored,
// and the rounded model copy (when given) from the stored parameter.
template <int w>
__device__ __forceinline__ void AdamWUpdate(void* param, int pdt, const void* grad, int gdt,
                                            float* m, float* v, void* model_copy, int mdt,
                                            int64_t i, const AdamWArgs& a,
                                            const AdamWConstants& c) {
  float p[w], g[w], mv[w], vv[w];
  LoadN(param, pdt, i, p);
  LoadN(grad, gdt, i, g);
  LoadN(m, kF32, i, mv);
  LoadN(v, kF32, i, vv);
#pragma unroll
  for (int k = 0; k < w; ++k) {
    mv[k] = a.beta1 * mv[k] + c.one_minus_beta1 * g[k];
    vv[k] = a.beta2 * vv[k] + c.one_minus_beta2 * g[k] * g[k];
    const float denom = sqrtf(vv[k]) / c.bc2_sqrt + a.eps;
    p[k] = p[k] * c.decay - c.step_size * mv[k] / denom;
  }
  StoreN(m, kF32, i, mv);
  StoreN(v, kF32, i, vv);
  StoreN(param, pdt, i, p);
  if (model_copy) {  // the stored parameter, rounded to the copy's dtype
    LoadN(param, pdt, i, p);
    StoreN(model_copy, mdt, i, p);
  }
}

template <int W>
__global__ void AdamWStepKernel(void* param, int pdt, const void* grad, int gdt, float* m, float* v,
                                int64_t n, AdamWArgs a, const float* step_ptr,
                                const float* found_inf, void* model_copy, int mdt) {
  if (found_inf && *found_inf != 0.0f) return;
  const AdamWConstants c = AdamWConstantsFor(a, step_ptr, a.weight_decay);
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    AdamWUpdate<kWidth<decltype(width)>>(param, pdt, grad, gdt, m, v, model_copy, mdt, i, a, c);
  });
}

using ParamBlocks = BlockMap<kMaxParamsPerStepLaunch>;

// The list's tensor t takes the blocks map gives it, in 16-byte groups (the
// launcher checks every buffer's alignment). ptxas (sm_90a): 80 registers,
// three blocks an SM, each thread with four 32-byte loads in flight: ample
// for the memory's latency. Bounds for four blocks would spill.
__global__ void AdamWStepListKernel(AdamWList list, ParamBlocks map, AdamWArgs a,
                                    const float* step_ptr, const float* found_inf) {
  if (found_inf && *found_inf != 0.0f) return;
  int64_t blocks, block;
  const int t = TensorOfBlock(map, &blocks, &block);
  const AdamWConstants c = AdamWConstantsFor(a, step_ptr, list.decay[t] ? a.weight_decay : 0.0f);
  ForEachGroupOfBlocks<kVec>(list.numel[t], block, blocks, [&](auto width, int64_t i) {
    AdamWUpdate<kWidth<decltype(width)>>(list.param[t], list.pdt[t], list.grad[t], list.gdt[t],
                                         list.exp_avg[t], list.exp_avg_sq[t], list.model_copy[t],
                                         list.mdt[t], i, a, c);
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

bool AdamWListAccepts(const void* param, const void* grad, const float* exp_avg,
                      const float* exp_avg_sq, const void* model_copy) {
  return Aligned16(param) && Aligned16(grad) && Aligned16(exp_avg) && Aligned16(exp_avg_sq) &&
         Aligned16(model_copy);
}

std::string LaunchAdamWStepList(const AdamWList& list, const AdamWArgs& a, const float* step_ptr,
                                const float* found_inf, Stream s) {
  if (list.count == 0) return "";
  for (int t = 0; t < list.count; ++t) {
    if (!AdamWListAccepts(list.param[t], list.grad[t], list.exp_avg[t], list.exp_avg_sq[t],
                          list.model_copy[t])) {
      return "LaunchAdamWStepList: tensor " + std::to_string(t) + " is not 16-byte aligned";
    }
  }
  static_assert(
      sizeof(AdamWList) + sizeof(ParamBlocks) + sizeof(AdamWArgs) + 2 * sizeof(void*) <= 4096,
      "a kernel's parameters fit CUDA's 4 KiB");
  const ParamBlocks map = BlocksBySize<kMaxParamsPerStepLaunch>(list.numel, list.count);
  LAUNCH(AdamWStepListKernel, map.first[list.count], kThreads, S(s), list, map, a, step_ptr,
         found_inf);
  return Check("AdamWStepListKernel");
}

}  // namespace ampd::engine::cuda
