// The device AMP API (device_amp.h) in terms of the host-visible ops. The CPU
// backend uses these as they are (reading a scalar is free there); they are
// also the reference the CUDA kernels are tested against.

#include "engine/backend/device_amp.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/scale_update.h"

namespace ampd::engine::backend {

using core::DeviceMemory;

namespace {

// grads *= factor on the backend; found_inf = 1 when a result is inf/NaN.
void MultiplyAndFlag(DeviceAmp& amp, DeviceMemory& memory, const std::vector<Tensor>& grads,
                     float factor, const Tensor& found_inf) {
  std::vector<Tensor> defined;
  for (const Tensor& g : grads) {
    if (g.defined()) defined.push_back(g);
  }
  if (defined.empty()) return;
  if (amp.UnscaleAndCheck(defined, factor).found_inf) memory.Fill(found_inf, 1.0);
}

}  // namespace

void DeviceAmp::UnscaleAndCheckOnDevice(const std::vector<Tensor>& grads,
                                        const DeviceAmpState& amp) {
  const double scale = amp_memory().ReadScalars({amp.scale}).at(0);
  const float inv_scale = static_cast<float>(1.0 / scale);  // as PyTorch: f64 reciprocal, to f32
  MultiplyAndFlag(*this, amp_memory(), grads, inv_scale, amp.found_inf);
}

void DeviceAmp::MultiplyAndCheckOnDevice(const std::vector<Tensor>& grads, float factor,
                                         const Tensor& found_inf) {
  MultiplyAndFlag(*this, amp_memory(), grads, factor, found_inf);
}

void DeviceAmp::UpdateScaleOnDevice(const DeviceAmpState& amp, const ScaleUpdateOptions& o) {
  if (!o.dynamic) return;
  const std::vector<double> v =
      amp_memory().ReadScalars({amp.scale, amp.growth_tracker, amp.found_inf});
  GradScalerState state{v[0], static_cast<int64_t>(v[1])};
  // The device keeps the scale in f32, as torch does: round after each update.
  state = AmpUpdateScale(state, v[2] != 0, o.growth_factor, o.backoff_factor, o.growth_interval);
  double scale = static_cast<float>(state.scale);
  if (o.min_scale > 0) scale = std::max(scale, o.min_scale);
  if (o.max_scale > 0) scale = std::min(scale, o.max_scale);
  amp_memory().Fill(amp.scale, scale);
  amp_memory().Fill(amp.growth_tracker, static_cast<double>(state.growth_tracker));
}

void DeviceAmp::SumOfSquaresOnDevice(const std::vector<Tensor>& tensors, const Tensor& out) {
  std::vector<Tensor> defined;
  for (const Tensor& t : tensors) {
    if (t.defined()) defined.push_back(t);
  }
  amp_memory().Fill(out, SumOfSquares(defined));
}

// The clipping factor of ClipOnDevice, or 1 where nothing is clipped.
float ClipFactor(double sum_sq, double max_norm) {
  const double norm = std::sqrt(sum_sq);
  return std::isfinite(norm) && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6))
                                                : 1.0f;
}

void DeviceAmp::ClipOnDevice(const std::vector<Tensor>& grads, const Tensor& sum_sq,
                             double max_norm, const Tensor& found_inf) {
  const float factor = ClipFactor(amp_memory().ReadScalars({sum_sq}).at(0), max_norm);
  if (factor != 1.0f) MultiplyAndFlag(*this, amp_memory(), grads, factor, found_inf);
}

void DeviceAmp::SgdStepFused(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                             const SgdHyper& h, bool first, const FusedStepArgs& args) {
  if (args.found_inf.defined() && amp_memory().ReadScalars({args.found_inf}).at(0) != 0) return;
  SgdStep(param, grad, momentum_buf, h, first);
  if (args.model_copy.defined()) amp_memory().CopyInto(args.model_copy, param);
}

void DeviceAmp::AdamWStepFused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                               const Tensor& exp_avg_sq, const AdamWHyper& h,
                               const FusedStepArgs& args) {
  if (args.found_inf.defined() && amp_memory().ReadScalars({args.found_inf}).at(0) != 0) return;
  AdamWHyper with_step = h;
  with_step.step = static_cast<int64_t>(amp_memory().ReadScalars({args.step}).at(0)) + 1;
  AdamWStep(param, grad, exp_avg, exp_avg_sq, with_step);
  if (args.model_copy.defined()) amp_memory().CopyInto(args.model_copy, param);
}

void DeviceAmp::AdamWStepFusedList(const std::vector<AdamWParam>& params, const AdamWHyper& h,
                                   const Tensor& found_inf, const Tensor& step) {
  for (const AdamWParam& p : params) AdamWStepFusedOne(p, h, found_inf, step);
}

void DeviceAmp::AdamWStepFusedOne(const AdamWParam& p, const AdamWHyper& h, const Tensor& found_inf,
                                  const Tensor& step) {
  AdamWHyper ph = h;
  if (!p.weight_decay) ph.weight_decay = 0;
  AdamWStepFused(p.param, p.grad, p.exp_avg, p.exp_avg_sq, ph, {found_inf, p.model_copy, step});
}

}  // namespace ampd::engine::backend
