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
// launch per tensor and no host read.

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

// SGD's momentum buffer in 8 bits (signed map); `first` initialises it to
// the first (decayed) gradient, as torch.optim.SGD does.
struct Sgd8bitStepKernel {
  static constexpr const char* kName = "sgd8bit_step";
  using Fn = void (*)(const Tensor& param, const Tensor& grad, const Tensor& codes,
                      const Tensor& absmax, const DeviceAmp::SgdHyper& h, bool first,
                      const DeviceAmp::FusedStepArgs& args);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_OPTIMIZER8BIT_H_
