#include "engine/nn/fp8_state.h"

#include <algorithm>

#include "engine/backend/kernels/fp8.h"
#include "engine/core/device_memory.h"

namespace ampd::engine::nn {

Fp8State Fp8State::Create(const backend::Fp8Recipe& recipe, std::vector<std::string> layers) {
  Fp8State s;
  s.recipe = recipe;
  s.layers = std::move(layers);
  const int64_t n = s.columns();
  s.amax_history = Tensor::Zeros({recipe.amax_history_len, n}, DType::kF32);
  s.scales = Tensor::Full({n}, DType::kF32, 1.0);
  s.scale_invs = Tensor::Full({n}, DType::kF32, 1.0);
  s.saturated = Tensor::Zeros({n}, DType::kF64);
  std::vector<float> max(n);
  const float forward = backend::Fp8ScaledMax(backend::ForwardFormat(recipe), recipe.margin);
  const float gradient = backend::Fp8ScaledMax(backend::GradientFormat(recipe), recipe.margin);
  for (int64_t c = 0; c < n; ++c) max[c] = c % 3 == 2 ? gradient : forward;
  s.scaled_max = Tensor::FromVector(max, {n}, DType::kF32);
  return s;
}

ops::Fp8LinearScaling Fp8State::For(size_t i) const {
  ops::Fp8LinearScaling f;
  f.amax_history = amax_history;
  f.scales = scales;
  f.scale_invs = scale_invs;
  f.index = 3 * static_cast<int64_t>(i);
  f.forward = backend::ForwardFormat(recipe);
  f.backward = backend::GradientFormat(recipe);
  f.saturated = saturated;
  if (recipe.kind == backend::Fp8ScalingKind::kCurrent) {
    f.current = true;
    f.scaled_max = scaled_max;
  }
  return f;
}

int64_t Fp8State::IndexOf(const std::string& layer) const {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] == layer) return static_cast<int64_t>(i);
  }
  return -1;
}

void Fp8State::Update() {
  backend::Kernel<backend::Fp8UpdateScalingKernel>(amax_history.device())(
      amax_history, scales, scale_invs, scaled_max, recipe.amax_compute_algo);
}

void Fp8State::ResetSaturated() {
  if (saturated.device() == Device::kCpu) {
    std::fill_n(saturated.data<double>(), saturated.numel(), 0.0);
  } else {
    core::DeviceMemoryFor(saturated.device()).Fill(saturated, 0.0);
  }
}

Fp8State Fp8State::To(Device device) const {
  Fp8State s = *this;
  s.amax_history = amax_history.To(device);
  s.scales = scales.To(device);
  s.scale_invs = scale_invs.To(device);
  s.scaled_max = scaled_max.To(device);
  s.saturated = saturated.To(device);
  return s;
}

Fp8State Fp8State::Scratch() const {
  Fp8State s = *this;
  s.amax_history = amax_history.Clone();
  s.scales = scales.Clone();
  s.scale_invs = scale_invs.Clone();
  s.saturated = saturated.Clone();
  return s;
}

std::vector<std::pair<std::string, Tensor>> Fp8State::Saved() const {
  return {{"fp8/amax_history", amax_history},
          {"fp8/scales", scales},
          {"fp8/scale_invs", scale_invs},
          {"fp8/saturated", saturated}};
}

}  // namespace ampd::engine::nn
