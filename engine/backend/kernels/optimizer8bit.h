#ifndef AMPD_ENGINE_BACKEND_KERNELS_OPTIMIZER8BIT_H_
#define AMPD_ENGINE_BACKEND_KERNELS_OPTIMIZER8BIT_H_

// 8-bit optimizer steps (bitsandbytes' blockwise method, quant_map.h): the
// states are u8 codes (one per element) and f32 absmax values (one per
// kQuantBlock elements). Each step dequantizes a block, runs the update in
// f32 exactly as the 32-bit step does (torch.optim semantics), takes the new
// per-block absmax and re-quantizes to the nearest code (m with the signed
// map, v with the unsigned one). No op lists them: the trainer asks for them
// by name when a job's optimizer has 8-bit states (CheckKernels).
//
// They are the fused form, as DeviceAmp's AdamWStepFused: with `args`
// empty they are the plain step at h.step; otherwise nothing changes when
// args.found_inf is non-zero, AdamW's bias correction uses args.step + 1
// (the steps applied before, on the device), and args.model_copy gets the
// new weights rounded to its dtype in the same pass. On a GPU that is one
// launch per tensor (the lists': one for many) and no host read.

#include <vector>

#include "engine/backend/device_amp.h"
#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct AdamW8bitStepKernel {
  static constexpr const char* kName = "adamw8bit_step";
  using Fn = void (*)(const Tensor& param, const Tensor& grad, const Tensor& m_codes,
                      const Tensor& m_absmax, const Tensor& v_codes, const Tensor& v_absmax,
                      const DeviceAmp::AdamWHyper& h, const DeviceAmp::FusedStepArgs& args);
};

// AdamW8bitStepKernel for each tensor of a list, with one skip flag and one
// device step for all and weight decay (h.weight_decay) only where an
// entry's `weight_decay` is set (nanoGPT's rule): the same values, bit for
// bit, as a call per tensor. On a GPU one launch takes many tensors (the
// issue's "one launch per parameter group"), as the 32-bit
// AdamWStepFusedList does; the CPU's is the loop.
struct AdamW8bitParam {
  Tensor param, grad, m_codes, m_absmax, v_codes, v_absmax;
  Tensor model_copy;  // optional
  bool weight_decay = true;
};
// For the host mirror (kernel_registry.h; f passes an undefined tensor on,
// as FusedStepArgs' MapTensors relies on).
template <typename F>
std::vector<AdamW8bitParam> MapTensors(const std::vector<AdamW8bitParam>& list, F f) {
  std::vector<AdamW8bitParam> out;
  out.reserve(list.size());
  for (const AdamW8bitParam& p : list) {
    out.push_back({f(p.param), f(p.grad), f(p.m_codes), f(p.m_absmax), f(p.v_codes),
                   f(p.v_absmax), f(p.model_copy), p.weight_decay});
  }
  return out;
}
struct AdamW8bitStepListKernel {
  static constexpr const char* kName = "adamw8bit_step_list";
  using Fn = void (*)(const std::vector<AdamW8bitParam>& params, const DeviceAmp::AdamWHyper& h,
                      const Tensor& found_inf, const Tensor& step);
};

// SGD's momentum buffer in 8 bits (signed map); `first` initialises it to
// the first (decayed) gradient, as torch.optim.SGD does.
struct Sgd8bitStepKernel {
  static constexpr const char* kName = "sgd8bit_step";
  using Fn = void (*)(const Tensor& param, const Tensor& grad, const Tensor& codes,
                      const Tensor& absmax, const DeviceAmp::SgdHyper& h, bool first,
                      const DeviceAmp::FusedStepArgs& args);
};

// Sgd8bitStepKernel for each tensor of a list, as AdamW8bitStepListKernel:
// one skip flag for all, h.weight_decay only where `weight_decay` is set.
struct Sgd8bitParam {
  Tensor param, grad, codes, absmax;
  Tensor model_copy;  // optional
  bool weight_decay = true;
};
template <typename F>
std::vector<Sgd8bitParam> MapTensors(const std::vector<Sgd8bitParam>& list, F f) {
  std::vector<Sgd8bitParam> out;
  out.reserve(list.size());
  for (const Sgd8bitParam& p : list) {
    out.push_back({f(p.param), f(p.grad), f(p.codes), f(p.absmax), f(p.model_copy),
                   p.weight_decay});
  }
  return out;
}
struct Sgd8bitStepListKernel {
  static constexpr const char* kName = "sgd8bit_step_list";
  using Fn = void (*)(const std::vector<Sgd8bitParam>& params, const DeviceAmp::SgdHyper& h,
                      bool first, const Tensor& found_inf);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_OPTIMIZER8BIT_H_
