#ifndef AMPD_ENGINE_NN_FP8_STATE_H_
#define AMPD_ENGINE_NN_FP8_STATE_H_

// A model's FP8 scaling state (precision.fp8): one amax history and scale per
// tensor that an FP8 GEMM casts, three per FP8 linear (its input, its weight,
// its output gradient), laid out as Transformer Engine keeps them and as the
// FP8 kernels take them (backend/kernels/fp8.h): amax_history [len, n],
// scales, scale_invs and scaled_max [n], f32, on the model's device. The
// model's forward passes each FP8 linear its columns (For); the trainer
// updates every column together once per step (Update), after the backward,
// and checkpoints the three tensors that change.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/fp8_scaling.h"
#include "engine/core/tensor.h"
#include "engine/ops/fp8_linear.h"

namespace ampd::engine::nn {

struct Fp8State {
  backend::Fp8Recipe recipe;
  std::vector<std::string> layers;  // the FP8 linears, in column order
  Tensor amax_history;
  Tensor scales;
  Tensor scale_invs;
  Tensor scaled_max;  // fp8_max(format) * 2^-margin per column (constant)
  // [n] f64: values each column's casts clipped to +-fp8_max since the last
  // scaling record (which reads and resets it).
  Tensor saturated;

  // Scales 1, histories 0, on the CPU.
  static Fp8State Create(const backend::Fp8Recipe& recipe, std::vector<std::string> layers);
  // The columns of layers[i] (3i: input, 3i + 1: weight, 3i + 2: gradient).
  ops::Fp8LinearScaling For(size_t i) const;
  // Index of `layer` in layers, or -1.
  int64_t IndexOf(const std::string& layer) const;
  int64_t columns() const { return 3 * static_cast<int64_t>(layers.size()); }
  // Every history rolled and every scale set from it (delayed scaling's
  // once-per-step update; with current scaling, a reset of this step's
  // amaxes), on the state's device.
  void Update();
  // The same state on `device` (copies).
  Fp8State To(Device device) const;
  // The saturation counts back to 0 (on the state's device).
  void ResetSaturated();
  // A copy whose casts do not touch this one (evaluations record no amax).
  Fp8State Scratch() const;
  // Checkpoint tensors: "fp8/amax_history", "fp8/scales", "fp8/scale_invs",
  // "fp8/saturated".
  std::vector<std::pair<std::string, Tensor>> Saved() const;
};

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_FP8_STATE_H_
