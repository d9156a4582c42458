#ifndef AMPD_TESTS_ENGINE_LAYER_SPECS_H_
#define AMPD_TESTS_ENGINE_LAYER_SPECS_H_

// Short builders for the sequential model's layers in tests.

#include <cstdint>

#include "engine/nn/sequential.h"

namespace ampd::engine::testing {

inline nn::LayerSpec Layer(nn::LayerKind kind) {
  nn::LayerSpec l;
  l.kind = kind;
  return l;
}

// A square conv2d: out channels, kernel k, zero padding, stride.
inline nn::LayerSpec Conv(int64_t out, int64_t k, int64_t pad = 0, int64_t stride = 1) {
  nn::LayerSpec l = Layer(nn::LayerKind::kConv2d);
  l.out = out;
  l.kernel[0] = l.kernel[1] = k;
  l.padding[0] = l.padding[1] = pad;
  l.stride[0] = l.stride[1] = stride;
  return l;
}

inline nn::LayerSpec MaxPool(int64_t k) {
  nn::LayerSpec l = Layer(nn::LayerKind::kMaxPool2d);
  l.kernel[0] = l.kernel[1] = k;
  return l;
}

inline nn::LayerSpec Linear(int64_t out) {
  nn::LayerSpec l = Layer(nn::LayerKind::kLinear);
  l.out = out;
  return l;
}

}  // namespace ampd::engine::testing

#endif  // AMPD_TESTS_ENGINE_LAYER_SPECS_H_
