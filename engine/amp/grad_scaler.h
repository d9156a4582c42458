#ifndef AMPD_ENGINE_AMP_GRAD_SCALER_H_
#define AMPD_ENGINE_AMP_GRAD_SCALER_H_

// Dynamic loss scaling with torch.amp.GradScaler's semantics and defaults:
//   scale(loss) multiplies by the scale; Unscale() multiplies every gradient by
//   1/scale (computed in f64, rounded to f32, as PyTorch does) and looks for
//   inf/NaN; a step with a non-finite gradient is skipped; Update() then
//   either backs the scale off (and resets the growth tracker) or counts a
//   good step, multiplying the scale by growth_factor after growth_interval
//   consecutive good steps (only if the result is finite).
// Beyond PyTorch: optional min/max bounds on the scale, a static mode (the
// scale never changes, non-finite steps are still skipped), and every skipped
// step reported with the first offending parameter.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/scale_update.h"
#include "engine/core/tensor.h"

namespace ampd::engine::amp {

struct GradScalerOptions {
  bool enabled = true;
  bool dynamic = true;  // false: static scale
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  std::optional<double> min_scale;
  std::optional<double> max_scale;
};

// Names the offending field ("loss_scaling.growth_factor: must be > 1, got 0.5").
absl::Status ValidateGradScalerOptions(const GradScalerOptions& options);

struct SkipEvent {
  int64_t step = 0;
  std::string reason;           // "non-finite gradient"
  std::string first_parameter;  // name of the first parameter with inf/NaN
  double scale_before = 0;
  double scale_after = 0;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  bool enabled() const { return options_.enabled; }
  // The scale as an f32 (what multiplies the loss), 1 when disabled.
  float scale() const;
  int64_t growth_tracker() const { return state_.growth_tracker; }
  const GradScalerOptions& options() const { return options_; }

  // loss * scale (differentiable).
  Tensor Scale(const Tensor& loss) const;

  // Unscales `grads` in place (once per step) and records whether any value is
  // non-finite. Returns true when the optimizer step may proceed.
  bool Unscale(const std::vector<Tensor>& grads, const std::vector<std::string>& names);
  bool found_inf() const { return found_inf_; }

  // After the (possibly skipped) step: adjusts the scale. Returns the skip
  // event when this step was skipped.
  std::optional<SkipEvent> Update(int64_t step);

  backend::GradScalerState state() const { return state_; }
  void LoadState(const backend::GradScalerState& state) { state_ = state; }

 private:
  GradScalerOptions options_;
  backend::GradScalerState state_;
  bool unscaled_ = false;
  bool found_inf_ = false;
  std::string first_bad_;
};

}  // namespace ampd::engine::amp

#endif  // AMPD_ENGINE_AMP_GRAD_SCALER_H_
