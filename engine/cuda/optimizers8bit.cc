// The CUDA backend: the 8-bit optimizer steps (backend/kernels/optimizer8bit.h),
// launches that read the skip flag and the step counter on the device and
// write the model copy in the same pass: AdamW's for a list of up to
// kMaxParamsPerStepLaunch tensors at once, SGD's one a tensor.

#include "engine/backend/kernels/optimizer8bit.h"

#include <vector>

#include "engine/backend/quant_map.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::AdamW8bitParam;
using backend::AdamW8bitStepKernel;
using backend::AdamW8bitStepListKernel;
using backend::Sgd8bitStepKernel;

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
  AdamW8bitList list;
  auto launch = [&] {
    if (list.count > 0 && Ok()) Record(LaunchAdamW8bitStepList(list, a, step_ptr, skip, maps, S()));
    list.count = 0;
  };
  for (const AdamW8bitParam& p : params) {
    if (p.param.numel() == 0) continue;
    const int t = list.count++;
    list.param[t] = p.param.raw();
    list.grad[t] = p.grad.raw();
    list.m_codes[t] = p.m_codes.data<uint8_t>();
    list.m_absmax[t] = p.m_absmax.data<float>();
    list.v_codes[t] = p.v_codes.data<uint8_t>();
    list.v_absmax[t] = p.v_absmax.data<float>();
    list.model_copy[t] = p.model_copy.defined() ? p.model_copy.raw() : nullptr;
    list.numel[t] = p.param.numel();
    list.pdt[t] = static_cast<int8_t>(Dt(p.param));
    list.gdt[t] = static_cast<int8_t>(Dt(p.grad));
    list.mdt[t] = static_cast<int8_t>(p.model_copy.defined() ? Dt(p.model_copy) : 0);
    list.decay[t] = p.weight_decay;
    if (list.count == kMaxParamsPerStepLaunch) launch();
  }
  launch();
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

AMPD_CUDA_KERNEL(AdamW8bitStepKernel, AdamW8bitStep);
AMPD_CUDA_KERNEL(AdamW8bitStepListKernel, AdamW8bitStepList);
AMPD_CUDA_KERNEL(Sgd8bitStepKernel, Sgd8bitStep);

}  // namespace ampd::engine::cuda
