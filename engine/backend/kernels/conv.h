#ifndef AMPD_ENGINE_BACKEND_KERNELS_CONV_H_
#define AMPD_ENGINE_BACKEND_KERNELS_CONV_H_

// 2-D convolution (torch.nn.functional.conv2d: NCHW input, [out, in/groups,
// kH, kW] weights, cross-correlation) and its gradients (kernel_registry.h).

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

// Everything about a convolution but its tensors. Per spatial dim: [0] is
// the height, [1] the width.
struct Conv2dGeometry {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};  // zeros on both sides
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

// PyTorch's output size: floor((in + 2p - d(k-1) - 1) / s) + 1; <= 0 when
// the (dilated) kernel does not fit the padded input.
inline int64_t ConvOutputSize(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                              int64_t dilation) {
  const int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// The output shape [N, out, OH, OW] of x [N, C, H, W] and w [out, C/groups, kH, kW].
inline std::vector<int64_t> Conv2dOutputShape(const std::vector<int64_t>& x,
                                              const std::vector<int64_t>& w,
                                              const Conv2dGeometry& g) {
  return {x[0], w[0], ConvOutputSize(x[2], w[2], g.stride[0], g.padding[0], g.dilation[0]),
          ConvOutputSize(x[3], w[3], g.stride[1], g.padding[1], g.dilation[1])};
}

struct Conv2dWeightGrads {
  Tensor dw, db;  // db undefined when there is no bias
};
template <typename F>
Conv2dWeightGrads MapTensors(const Conv2dWeightGrads& g, F f) {
  return {f(g.dw), g.db.defined() ? f(g.db) : Tensor()};
}

// y = conv2d(x, w) + bias (bias [out], or undefined), rounded once to `out`.
// x and w share a dtype; accumulation is f32 (f64 for f64).
struct Conv2dKernel {
  static constexpr const char* kName = "conv2d";
  static constexpr OpId kOps[] = {OpId::kConv2d};
  using Fn = Tensor (*)(const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Conv2dGeometry& g, DType out);
};
// dx [x_shape] from dy and w.
struct Conv2dBackwardDataKernel {
  static constexpr const char* kName = "conv2d_backward_data";
  static constexpr OpId kOps[] = {OpId::kConv2d};
  using Fn = Tensor (*)(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& x_shape,
                        const Conv2dGeometry& g, DType out);
};
// dw [w_shape] (and db [out] when `bias`) from x and dy.
struct Conv2dBackwardWeightKernel {
  static constexpr const char* kName = "conv2d_backward_weight";
  static constexpr OpId kOps[] = {OpId::kConv2d};
  using Fn = Conv2dWeightGrads (*)(const Tensor& x, const Tensor& dy,
                                   const std::vector<int64_t>& w_shape, bool bias,
                                   const Conv2dGeometry& g, DType out);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_CONV_H_
