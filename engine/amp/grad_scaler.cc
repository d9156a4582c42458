#include "engine/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/core/error_subject.h"
#include "engine/ops/ops.h"

namespace ampd::engine::amp {

using backend::AmpUpdateScale;
using backend::BackendOf;
using backend::NonFiniteCheck;
using core::FieldError;
using ops::MulScalar;

absl::Status ValidateGradScalerOptions(const GradScalerOptions& o) {
  auto bad = [](const char* field, const std::string& why) {
    return FieldError(absl::StrCat("loss_scaling.", field), why);
  };
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale)) {
    return bad("init_scale", absl::StrCat("must be a finite number > 0, got ", o.init_scale));
  }
  if (!(o.growth_factor > 1.0)) {
    return bad("growth_factor", absl::StrCat("must be > 1, got ", o.growth_factor));
  }
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0)) {
    return bad("backoff_factor", absl::StrCat("must be in (0, 1), got ", o.backoff_factor));
  }
  if (o.growth_interval < 1) {
    return bad("growth_interval", absl::StrCat("must be >= 1, got ", o.growth_interval));
  }
  if (o.min_scale && !(*o.min_scale > 0)) {
    return bad("min_scale", absl::StrCat("must be > 0, got ", *o.min_scale));
  }
  if (o.max_scale && !(*o.max_scale > 0)) {
    return bad("max_scale", absl::StrCat("must be > 0, got ", *o.max_scale));
  }
  if (o.min_scale && o.max_scale && *o.min_scale > *o.max_scale) {
    return bad("max_scale",
               absl::StrCat("must be >= min_scale (", *o.min_scale, "), got ", *o.max_scale));
  }
  return absl::OkStatus();
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  state_.scale = static_cast<float>(options.init_scale);
}

float GradScaler::scale() const {
  return options_.enabled ? static_cast<float>(state_.scale) : 1.0f;
}

Tensor GradScaler::Scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  return MulScalar(loss, scale());
}

bool GradScaler::Unscale(const std::vector<Tensor>& grads, const std::vector<std::string>& names) {
  if (!options_.enabled || unscaled_) return !found_inf_;
  // As PyTorch: inv_scale = scale.double().reciprocal().float().
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale()));
  std::vector<Tensor> defined;
  std::vector<size_t> index;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) {
      defined.push_back(grads[i]);
      index.push_back(i);
    }
  }
  NonFiniteCheck check = defined.empty()
                             ? NonFiniteCheck{}
                             : BackendOf(defined[0]).UnscaleAndCheck(defined, inv_scale);
  unscaled_ = true;
  found_inf_ = check.found_inf;
  first_bad_.clear();
  if (check.found_inf) {
    const size_t i = index[check.first_index];
    first_bad_ = i < names.size() ? names[i] : absl::StrCat("parameter #", i);
  }
  return !found_inf_;
}

std::optional<SkipEvent> GradScaler::Update(int64_t step) {
  std::optional<SkipEvent> event;
  if (!options_.enabled) return event;
  const double before = state_.scale;
  if (options_.dynamic) {
    state_ = AmpUpdateScale(state_, found_inf_, options_.growth_factor, options_.backoff_factor,
                            options_.growth_interval);
    if (options_.min_scale) state_.scale = std::max(state_.scale, *options_.min_scale);
    if (options_.max_scale) state_.scale = std::min(state_.scale, *options_.max_scale);
  }
  if (found_inf_) {
    event = SkipEvent{step, "non-finite gradient", first_bad_, before, state_.scale};
  }
  unscaled_ = false;
  found_inf_ = false;
  return event;
}

}  // namespace ampd::engine::amp
