#ifndef AMPD_ENGINE_BACKEND_SCALE_UPDATE_H_
#define AMPD_ENGINE_BACKEND_SCALE_UPDATE_H_

// The loss-scale update rule, shared by the host GradScaler (engine/amp) and
// the device AMP defaults every backend inherits (device_amp.cc). It lives
// here, below both, so the backend layer does not depend on amp.

#include <cstdint>

namespace ampd::engine::backend {

struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;
};

// PyTorch's documented update rule (torch._amp_update_scale_), as a pure
// function, for replaying trajectories in tests: returns the new state.
GradScalerState AmpUpdateScale(GradScalerState state, bool found_inf, double growth_factor,
                               double backoff_factor, int64_t growth_interval);

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_SCALE_UPDATE_H_
