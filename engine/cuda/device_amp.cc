// The CUDA backend: device AMP and the optimizer updates, one launch per list of
// tensors, no host reads on the device path.

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

engine::backend::NonFiniteCheck CudaBackend::UnscaleAndCheck(const std::vector<Tensor>& grads,
                                                             float inv_scale) {
  engine::backend::NonFiniteCheck check;
  Tensor found = Allocate({1}, DType::kF32, true);
  for (const TensorList& list : Lists(grads)) {
    if (Ok()) Record(LaunchMultiplyAndCheck(list, inv_scale, found.data<float>(), S()));
  }
  if (ReadScalars({found})[0] == 0) return check;
  check.found_inf = true;
  // Which tensor: each is checked on its own (a rare path; it reads back).
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    Tensor one = Allocate({1}, DType::kF32, true);
    if (Ok()) Record(LaunchMultiplyAndCheck(Lists({grads[i]})[0], 1.0f, one.data<float>(), S()));
    if (ReadScalars({one})[0] != 0) {
      check.first_index = static_cast<int>(i);
      break;
    }
  }
  return check;
}

double CudaBackend::SumOfSquares(const std::vector<Tensor>& tensors) {
  Tensor out = Allocate({1}, DType::kF64, false);
  SumOfSquaresInto(tensors, out);
  return ReadScalars({out})[0];
}

void CudaBackend::SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                          const SgdHyper& h, bool first) {
  SgdStepFused(param, grad, momentum_buf, h, first, FusedStepArgs{});
}

void CudaBackend::AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const AdamWHyper& h) {
  // No flag, no model copy, no device step: the step is h.step.
  AdamWStepFused(param, grad, exp_avg, exp_avg_sq, h, FusedStepArgs{});
}

void CudaBackend::UnscaleAndCheckOnDevice(const std::vector<Tensor>& grads,
                                          const engine::backend::DeviceAmpState& amp) {
  for (const TensorList& list : Lists(grads)) {
    if (Ok()) {
      Record(
          LaunchUnscaleAndCheck(list, amp.scale.data<float>(), amp.found_inf.data<float>(), S()));
    }
  }
}

void CudaBackend::MultiplyAndCheckOnDevice(const std::vector<Tensor>& grads, float factor,
                                           const Tensor& found_inf) {
  for (const TensorList& list : Lists(grads)) {
    if (Ok()) Record(LaunchMultiplyAndCheck(list, factor, found_inf.data<float>(), S()));
  }
}

void CudaBackend::UpdateScaleOnDevice(const engine::backend::DeviceAmpState& amp,
                                      const engine::backend::ScaleUpdateOptions& o) {
  if (!o.dynamic || !Ok()) return;
  Record(LaunchUpdateScale(amp.scale.data<float>(), amp.growth_tracker.data<float>(),
                           amp.found_inf.data<float>(), o.growth_factor, o.backoff_factor,
                           o.growth_interval, o.min_scale, o.max_scale, S()));
}

void CudaBackend::SumOfSquaresOnDevice(const std::vector<Tensor>& tensors, const Tensor& out) {
  SumOfSquaresInto(tensors, out);
}

void CudaBackend::ClipOnDevice(const std::vector<Tensor>& grads, const Tensor& sum_sq,
                               double max_norm, const Tensor& found_inf) {
  Tensor factor = Allocate({1}, DType::kF32, false);
  if (Ok()) Record(LaunchClipFactor(sum_sq.data<float>(), max_norm, factor.data<float>(), S()));
  for (const TensorList& list : Lists(grads)) {
    if (Ok()) {
      Record(LaunchMultiplyByDeviceFactorAndCheck(list, factor.data<float>(),
                                                  found_inf.data<float>(), S()));
    }
  }
}

void CudaBackend::SgdStepFused(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                               const SgdHyper& h, bool first, const FusedStepArgs& args) {
  SgdArgs a{h.lr, h.momentum, h.weight_decay, h.nesterov, first};
  if (!Ok()) return;
  Record(LaunchSgdStep(param.raw(), Dt(param), grad.raw(), Dt(grad),
                       h.momentum != 0 ? momentum_buf.data<float>() : nullptr, param.numel(), a,
                       args.found_inf.defined() ? args.found_inf.data<float>() : nullptr,
                       args.model_copy.defined() ? args.model_copy.raw() : nullptr,
                       args.model_copy.defined() ? Dt(args.model_copy) : 0, S()));
}

void CudaBackend::AdamWStepFused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                 const Tensor& exp_avg_sq, const AdamWHyper& h,
                                 const FusedStepArgs& args) {
  AdamWArgs a{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step};
  if (!Ok()) return;
  Record(LaunchAdamWStep(param.raw(), Dt(param), grad.raw(), Dt(grad), exp_avg.data<float>(),
                         exp_avg_sq.data<float>(), param.numel(), a,
                         args.step.defined() ? args.step.data<float>() : nullptr,
                         args.found_inf.defined() ? args.found_inf.data<float>() : nullptr,
                         args.model_copy.defined() ? args.model_copy.raw() : nullptr,
                         args.model_copy.defined() ? Dt(args.model_copy) : 0, S()));
}

void CudaBackend::AdamWStepFusedList(const std::vector<AdamWParam>& params, const AdamWHyper& h,
                                     const Tensor& found_inf, const Tensor& step) {
  const AdamWArgs a{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step};
  const float* step_ptr = step.defined() ? step.data<float>() : nullptr;
  const float* skip = found_inf.defined() ? found_inf.data<float>() : nullptr;
  StepInLists<AdamWList>(
      params,
      [&](const AdamWParam& p) {
        if (AdamWListAccepts(p.param.raw(), p.grad.raw(), p.exp_avg.data<float>(),
                             p.exp_avg_sq.data<float>(),
                             p.model_copy.defined() ? p.model_copy.raw() : nullptr)) {
          return true;
        }
        AdamWStepFusedOne(p, h, found_inf, step);  // the single-tensor kernel handles any alignment
        return false;
      },
      [](AdamWList& list, int t, const AdamWParam& p) {
        list.exp_avg[t] = p.exp_avg.data<float>();
        list.exp_avg_sq[t] = p.exp_avg_sq.data<float>();
      },
      [&](const AdamWList& list) {
        if (Ok()) Record(LaunchAdamWStepList(list, a, step_ptr, skip, S()));
      });
}

// The defined tensors, kMaxTensorsPerLaunch to a list (none: no list).
std::vector<TensorList> CudaBackend::Lists(const std::vector<Tensor>& tensors) {
  std::vector<TensorList> lists;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (lists.empty() || lists.back().count == kMaxTensorsPerLaunch) lists.emplace_back();
    TensorList& list = lists.back();
    list.ptr[list.count] = t.raw();
    list.numel[list.count] = t.numel();
    list.dt[list.count] = Dt(t);
    ++list.count;
  }
  return lists;
}

void CudaBackend::SumOfSquaresInto(const std::vector<Tensor>& tensors, const Tensor& out) {
  std::vector<TensorList> lists = Lists(tensors);
  if (lists.empty()) lists.emplace_back();  // still writes the (zero) sum
  bool accumulate = false;
  for (const TensorList& list : lists) {
    if (Ok()) {
      Record(LaunchSumOfSquares(list, Scratch(), accumulate, out.raw(), Dt(out), S()));
    }
    accumulate = true;
  }
}

}  // namespace ampd::engine::cuda
