#include "engine/backend/scale_update.h"

#include <cmath>

namespace ampd::engine::backend {

GradScalerState AmpUpdateScale(GradScalerState s, bool found_inf, double growth_factor,
                               double backoff_factor, int64_t growth_interval) {
  // PyTorch keeps the scale as an f32 tensor: every product is rounded to f32.
  const float scale = static_cast<float>(s.scale);
  if (found_inf) {
    s.scale = static_cast<float>(scale * static_cast<float>(backoff_factor));
    s.growth_tracker = 0;
    return s;
  }
  const int64_t successful = s.growth_tracker + 1;
  if (successful == growth_interval) {
    const float grown = scale * static_cast<float>(growth_factor);
    if (std::isfinite(grown)) s.scale = grown;
    s.growth_tracker = 0;
  } else {
    s.growth_tracker = successful;
  }
  return s;
}

}  // namespace ampd::engine::backend
