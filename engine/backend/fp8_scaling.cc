#include "engine/backend/fp8_scaling.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ampd::engine::backend {

absl::Status ValidateFp8Recipe(const Fp8Recipe& r, const std::string& prefix) {
  if (!(r.margin >= 0.0f) || !std::isfinite(r.margin)) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".margin: must be a finite number >= 0, got ", r.margin));
  }
  if (r.amax_history_len < 1 || r.amax_history_len > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, ".amax_history_len: must be in [1, 65536], got ", r.amax_history_len));
  }
  return absl::OkStatus();
}

float Fp8ScaledMax(core::Fp8Format format, float margin) {
  return core::Fp8Max(format) * std::pow(2.0f, -margin);
}

void UpdateFp8ScalingColumn(Fp8TensorScaling t, int64_t len, AmaxAlgo algo, float scaled_max) {
  float* h = t.amax_history;
  const int64_t s = t.stride;
  const float current = h[0];
  float amax = current;
  if (algo == AmaxAlgo::kMax) {
    // fmaxf, as TE: a NaN entry is passed over unless every entry is NaN.
    for (int64_t i = 1; i < len; ++i) amax = std::fmax(amax, h[i * s]);
  }
  // Roll: slot 0 is freed for the next step, this step's amax becomes the
  // newest of the previous ones, and the oldest (slot 1) drops out.
  for (int64_t i = 1; i < len - 1; ++i) h[i * s] = h[(i + 1) * s];
  if (len > 1) h[(len - 1) * s] = current;
  h[0] = 0.0f;
  *t.scale = Fp8ScaleFromAmax(amax, scaled_max, *t.scale);
  *t.scale_inv = 1.0f / *t.scale;
}

void UpdateFp8Scaling(const Fp8Recipe& recipe, core::Fp8Format format, Fp8TensorScaling t) {
  UpdateFp8ScalingColumn(t, recipe.amax_history_len, recipe.amax_compute_algo,
                         Fp8ScaledMax(format, recipe.margin));
}

}  // namespace ampd::engine::backend
