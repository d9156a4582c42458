#include "engine/backend/fp8_scaling.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"

namespace ampd::engine::backend {

absl::Status ValidateFp8Recipe(const Fp8Recipe& r, const std::string& prefix) {
  if (!(r.margin >= 0.0f) || !std::isfinite(r.margin)) {
    return core::FieldError(prefix + ".margin",
                            absl::StrCat("must be a finite number >= 0, got ", r.margin));
  }
  if (r.amax_history_len < 1 || r.amax_history_len > 65536) {
    return core::FieldError(prefix + ".amax_history_len",
                            absl::StrCat("must be in [1, 65536], got ", r.amax_history_len));
  }
  return absl::OkStatus();
}

float Fp8ScaledMax(core::Fp8Format format, float margin) {
  return core::Fp8Max(format) * std::pow(2.0f, -margin);
}

void UpdateFp8ScalingColumn(Fp8TensorScaling t, int64_t len, AmaxAlgo algo, float scaled_max) {
  core::Fp8UpdateScalingColumn(t.amax_history, len, t.stride, algo, scaled_max, t.scale,
                               t.scale_inv);
}

void UpdateFp8Scaling(const Fp8Recipe& recipe, core::Fp8Format format, Fp8TensorScaling t) {
  UpdateFp8ScalingColumn(t, recipe.amax_history_len, recipe.amax_compute_algo,
                         Fp8ScaledMax(format, recipe.margin));
}

}  // namespace ampd::engine::backend
