#ifndef AMPD_ENGINE_BACKEND_FP8_SCALING_H_
#define AMPD_ENGINE_BACKEND_FP8_SCALING_H_

// FP8 scaling, Transformer Engine's recipe. Every tensor an FP8 GEMM casts
// (its input, its weight, the gradient of its output) has a scale: values
// are multiplied by it before the cast and the GEMM multiplies its result by
// the inverses. The scale comes from the tensor's amax (largest magnitude):
//
//   scale = (fp8_max / amax) / 2^margin
//
// kept from before when amax is 0 or not finite, and FP32_MAX where the
// quotient overflows to Inf (a tiny amax).
//  - Delayed scaling (TE's DelayedScaling, the default): each cast records
//    its tensor's amax in slot 0 of an amax history of amax_history_len
//    entries; once per step every history is updated together: the amax to
//    use is the largest of all entries ("max") or slot 0 ("most_recent"), the
//    history rolls so that slot 0 is free for the next step and the oldest
//    entry drops out, and the new scale is used by the next step's casts.
//    The window is thus the last amax_history_len steps, this one included.
//  - Current scaling: the scale comes from the tensor's own amax, just before
//    its cast (no history).
// The format is per tensor: HYBRID (TE's default) casts forward tensors
// (inputs, weights) to E4M3 and gradients to E5M2; E4M3 uses it for all.
//
// The recipe is here, below the backends, because their device kernels apply
// it too (on the device, with no host read per step); the scale rule itself
// is one function of core/fp8.h, shared, so every backend computes the same
// scale bit for bit.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/core/fp8.h"

namespace ampd::engine::backend {

enum class Fp8ScalingKind : uint8_t { kDelayed, kCurrent };
using core::AmaxAlgo;
using core::Fp8ScaleFromAmax;
enum class Fp8FormatRecipe : uint8_t { kHybrid, kE4M3 };

// TE's DelayedScaling defaults.
struct Fp8Recipe {
  Fp8ScalingKind kind = Fp8ScalingKind::kDelayed;
  Fp8FormatRecipe format = Fp8FormatRecipe::kHybrid;
  float margin = 0.0f;
  int amax_history_len = 1024;
  AmaxAlgo amax_compute_algo = AmaxAlgo::kMax;
};

// Names the offending field under `prefix` ("precision.fp8.margin: ...").
absl::Status ValidateFp8Recipe(const Fp8Recipe& recipe, const std::string& prefix);

// The format of a forward tensor (input, weight) or of a gradient.
inline core::Fp8Format ForwardFormat(const Fp8Recipe&) { return core::Fp8Format::kE4M3; }
inline core::Fp8Format GradientFormat(const Fp8Recipe& r) {
  return r.format == Fp8FormatRecipe::kHybrid ? core::Fp8Format::kE5M2 : core::Fp8Format::kE4M3;
}

// fp8_max * 2^-margin, in f32 as TE computes it (on the host, once).
float Fp8ScaledMax(core::Fp8Format format, float margin);

// Fp8ScaleFromAmax (core/fp8.h, beside the formats, so that the CUDA
// kernels share it) is the scale for an amax.

// One tensor's delayed-scaling state, as TE keeps it: history[0] is this
// step's amax (the casts record into it), history[1..len-1] the previous
// steps', `stride` floats apart (a column of a [len, n] history).
struct Fp8TensorScaling {
  float* amax_history = nullptr;  // amax_history_len entries
  float* scale = nullptr;
  float* scale_inv = nullptr;
  int64_t stride = 1;
};

// The once-per-step update of one tensor's history and scale:
// core::Fp8UpdateScalingColumn (which the device kernels run too), with the
// new scale from `scaled_max` (Fp8ScaledMax).
void UpdateFp8ScalingColumn(Fp8TensorScaling t, int64_t len, AmaxAlgo algo, float scaled_max);
void UpdateFp8Scaling(const Fp8Recipe& recipe, core::Fp8Format format, Fp8TensorScaling t);

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_FP8_SCALING_H_
