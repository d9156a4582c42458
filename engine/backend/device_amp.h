#ifndef AMPD_ENGINE_BACKEND_DEVICE_AMP_H_
#define AMPD_ENGINE_BACKEND_DEVICE_AMP_H_

// Device AMP: what a backend does to a step's gradients and parameters as
// lists, in place (torch.amp.GradScaler's unscale and inf check, the scale
// update, gradient clipping's norm, the optimizer updates). Part of every
// Backend. The defaults (device_amp.cc) are the reference implementations in
// terms of the host-readable API: the CPU uses them as they are (reading a
// scalar is free there), and the CUDA kernels are tested against them.

#include <cstdint>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct NonFiniteCheck {
  bool found_inf = false;
  int first_index = -1;  // index into the tensor list of the first non-finite one
};

// The device-side AMP state (torch.amp.GradScaler's _scale, _growth_tracker
// and found_inf tensors): f32 [1] tensors on the backend's device, so a step
// can unscale, decide to skip and update the scale without the host reading
// anything. The host reads them (ReadScalars) only when it reports metrics.
struct DeviceAmpState {
  Tensor scale;           // the loss scale
  Tensor growth_tracker;  // consecutive good steps (integer-valued)
  Tensor found_inf;       // 1 when this step saw inf/NaN, else 0
};

struct ScaleUpdateOptions {
  bool dynamic = true;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0;  // 0: no bound
  double max_scale = 0;  // 0: no bound
};

// ClipOnDevice's factor for a sum of squares: (float)(max_norm / (norm +
// 1e-6)) with norm = sqrt(sum_sq) in f64 when norm is finite and above
// max_norm, else 1 (nothing clipped).
float ClipFactor(double sum_sq, double max_norm);

class DeviceAmp {
 public:
  virtual ~DeviceAmp() = default;

  // --- With host reads (the CPU path, and the reference).
  // In place: multiplies every tensor by inv_scale and reports non-finite values
  // (PyTorch's _amp_foreach_non_finite_check_and_unscale_).
  virtual NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads, float inv_scale) = 0;
  // Sum of squares of all elements of all tensors, in fp64 (gradient clipping).
  virtual double SumOfSquares(const std::vector<Tensor>& tensors) = 0;

  // Optimizer updates, in place, with torch.optim semantics; math in f32
  // whatever the param dtype (a low-precision param is rounded once).
  struct SgdHyper {
    float lr = 0, momentum = 0, weight_decay = 0;
    bool nesterov = false;
  };
  // `momentum_buf` (f32) is used when momentum != 0; `first` initialises it.
  virtual void SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdHyper& h, bool first) = 0;
  struct AdamWHyper {
    float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
    int64_t step = 1;  // 1-based, for bias correction
  };
  virtual void AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                         const Tensor& exp_avg_sq, const AdamWHyper& h) = 0;

  // --- Without host synchronisation (the device path of the trainer).
  // Every gradient *= 1/scale (the reciprocal taken in f64 and rounded to f32,
  // as PyTorch); amp.found_inf becomes 1 if any result is inf/NaN. One launch
  // for all tensors on a device backend.
  virtual void UnscaleAndCheckOnDevice(const std::vector<Tensor>& grads, const DeviceAmpState& amp);
  // Every gradient *= factor (gradient clipping); found_inf (f32 [1]) becomes
  // 1 if any result is inf/NaN. No host read.
  virtual void MultiplyAndCheckOnDevice(const std::vector<Tensor>& grads, float factor,
                                        const Tensor& found_inf);
  // torch._amp_update_scale_ on the device state, then the optional bounds.
  virtual void UpdateScaleOnDevice(const DeviceAmpState& amp, const ScaleUpdateOptions& o);
  // Sum of squares of all elements into `out` (f32 [1]) without a host read.
  virtual void SumOfSquaresOnDevice(const std::vector<Tensor>& tensors, const Tensor& out);
  // Gradient clipping by the global norm without a host read (as
  // torch.nn.utils.clip_grad_norm_, which does not wait either): with norm =
  // sqrt(sum_sq[0]) in f64 (sum_sq: f32 [1], from SumOfSquaresOnDevice), when
  // norm is finite and above max_norm every gradient *= (float)(max_norm /
  // (norm + 1e-6)) and found_inf becomes 1 if a result is inf/NaN; otherwise
  // nothing changes. The factor is the same f64 arithmetic on host and device.
  virtual void ClipOnDevice(const std::vector<Tensor>& grads, const Tensor& sum_sq, double max_norm,
                            const Tensor& found_inf);
  // The fused optimizer step: does nothing when found_inf (if defined) is
  // non-zero; otherwise updates the f32 master `param` and, when `model_copy`
  // is defined, writes it rounded to the model's dtype in the same pass.
  // AdamW's bias correction uses step + 1, `step` (f32 [1], on the device)
  // holding the steps applied before this one.
  struct FusedStepArgs {
    Tensor found_inf;   // optional
    Tensor model_copy;  // optional
    Tensor step;        // AdamW: required
    // For the host mirror (kernel_registry.h): the 8-bit steps take these.
    template <typename F>
    friend FusedStepArgs MapTensors(const FusedStepArgs& a, F f) {
      return {f(a.found_inf), f(a.model_copy), f(a.step)};
    }
  };
  virtual void SgdStepFused(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                            const SgdHyper& h, bool first, const FusedStepArgs& args);
  virtual void AdamWStepFused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                              const Tensor& exp_avg_sq, const AdamWHyper& h,
                              const FusedStepArgs& args);
  // AdamWStepFused for each parameter of a list (one launch for many on a
  // device backend), with one skip flag and step for all: the same values,
  // bit for bit, as a call per parameter. Weight decay only where
  // `weight_decay` is set (nanoGPT's rule: not biases, norms, embeddings).
  struct AdamWParam {
    Tensor param, grad, exp_avg, exp_avg_sq;
    Tensor model_copy;  // optional
    bool weight_decay = true;
  };
  virtual void AdamWStepFusedList(const std::vector<AdamWParam>& params, const AdamWHyper& h,
                                  const Tensor& found_inf, const Tensor& step);

 protected:
  // AdamWStepFused for one entry of AdamWStepFusedList (its decay applied).
  void AdamWStepFusedOne(const AdamWParam& p, const AdamWHyper& h, const Tensor& found_inf,
                         const Tensor& step);
  // The memory the reference implementations read and write through.
  virtual core::DeviceMemory& amp_memory() = 0;
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_DEVICE_AMP_H_
