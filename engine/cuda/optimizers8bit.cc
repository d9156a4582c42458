// The CUDA backend: the 8-bit optimizer steps (backend/kernels/optimizer8bit.h),
// launches that read the skip flag and the step counter on the device and
// write the model copy in the same pass, for one tensor or for a list of up
// to kMaxParamsPerStepLaunch tensors at once.

#include "engine/backend/kernels/optimizer8bit.h"

#include <vector>

#include "engine/backend/quant_map.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::AdamW8bitParam;
using backend::AdamW8bitStepKernel;
using backend::AdamW8bitStepListKernel;
using backend::Sgd8bitParam;
using backend::Sgd8bitStepKernel;
using backend::Sgd8bitStepListKernel;

const float* CudaBackend::QuantMaps() {
  ThreadContext& c = Ctx();
  if (!c.quant_maps.defined() && Ok()) {
    // Per thread, uploaded on its own stream: ordered before its kernels.
    std::vector<float> maps(backend::DynamicMap().begin(), backend::DynamicMap().end());
    maps.insert(maps.end(), backend::UnsignedDynamicMap().begin(),
                backend::UnsignedDynamicMap().end());
    Tensor t = Allocate({512}, DType::kF32, false);
    Upload(t.raw(), maps.data(), maps.size() * sizeof(float));
    c.quant_maps = t;
  }
  return c.quant_maps.defined() ? c.quant_maps.data<float>() : nullptr;
}

void CudaBackend::AdamW8bitStep(const Tensor& param, const Tensor& grad, const Tensor& m_codes,
                                const Tensor& m_absmax, const Tensor& v_codes,
                                const Tensor& v_absmax, const AdamWHyper& h,
                                const FusedStepArgs& args) {
  AdamWArgs a{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step};
  const float* maps = QuantMaps();
  if (!Ok()) return;
  Record(LaunchAdamW8bitStep(
      param.raw(), Dt(param), grad.raw(), Dt(grad), m_codes.data<uint8_t>(),
      m_absmax.data<float>(), v_codes.data<uint8_t>(), v_absmax.data<float>(), param.numel(), a,
      args.step.defined() ? args.step.data<float>() : nullptr,
      args.found_inf.defined() ? args.found_inf.data<float>() : nullptr,
      args.model_copy.defined() ? args.model_copy.raw() : nullptr,
      args.model_copy.defined() ? Dt(args.model_copy) : 0, maps, S()));
}

void CudaBackend::AdamW8bitStepList(const std::vector<AdamW8bitParam>& params,
                                    const AdamWHyper& h, const Tensor& found_inf,
                                    const Tensor& step) {
  const AdamWArgs a{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step};
  const float* maps = QuantMaps();
  const float* step_ptr = step.defined() ? step.data<float>() : nullptr;
  const float* skip = found_inf.defined() ? found_inf.data<float>() : nullptr;
  StepInLists<AdamW8bitList>(
      params, [](const AdamW8bitParam&) { return true; },
      [](AdamW8bitList& list, int t, const AdamW8bitParam& p) {
        list.m_codes[t] = p.m_codes.data<uint8_t>();
        list.m_absmax[t] = p.m_absmax.data<float>();
        list.v_codes[t] = p.v_codes.data<uint8_t>();
        list.v_absmax[t] = p.v_absmax.data<float>();
      },
      [&](const AdamW8bitList& list) {
        if (Ok()) Record(LaunchAdamW8bitStepList(list, a, step_ptr, skip, maps, S()));
      });
}

void CudaBackend::Sgd8bitStep(const Tensor& param, const Tensor& grad, const Tensor& codes,
                              const Tensor& absmax, const SgdHyper& h, bool first,
                              const FusedStepArgs& args) {
  SgdArgs a{h.lr, h.momentum, h.weight_decay, h.nesterov, first};
  const float* maps = QuantMaps();
  if (!Ok()) return;
  Record(LaunchSgd8bitStep(param.raw(), Dt(param), grad.raw(), Dt(grad), codes.data<uint8_t>(),
                           absmax.data<float>(), param.numel(), a,
                           args.found_inf.defined() ? args.found_inf.data<float>() : nullptr,
                           args.model_copy.defined() ? args.model_copy.raw() : nullptr,
                           args.model_copy.defined() ? Dt(args.model_copy) : 0, maps, S()));
}

void CudaBackend::Sgd8bitStepList(const std::vector<Sgd8bitParam>& params, const SgdHyper& h,
                                  bool first, const Tensor& found_inf) {
  const SgdArgs a{h.lr, h.momentum, h.weight_decay, h.nesterov, first};
  const float* maps = QuantMaps();
  const float* skip = found_inf.defined() ? found_inf.data<float>() : nullptr;
  StepInLists<Sgd8bitList>(
      params, [](const Sgd8bitParam&) { return true; },
      [](Sgd8bitList& list, int t, const Sgd8bitParam& p) {
        list.codes[t] = p.codes.data<uint8_t>();
        list.absmax[t] = p.absmax.data<float>();
      },
      [&](const Sgd8bitList& list) {
        if (Ok()) Record(LaunchSgd8bitStepList(list, a, skip, maps, S()));
      });
}

AMPD_CUDA_KERNEL(AdamW8bitStepKernel, AdamW8bitStep);
AMPD_CUDA_KERNEL(AdamW8bitStepListKernel, AdamW8bitStepList);
AMPD_CUDA_KERNEL(Sgd8bitStepKernel, Sgd8bitStep);
AMPD_CUDA_KERNEL(Sgd8bitStepListKernel, Sgd8bitStepList);

}  // namespace ampd::engine::cuda
