#ifndef AMPD_ENGINE_OPS_CONV_H_
#define AMPD_ENGINE_OPS_CONV_H_

// 2-D convolution (torch.nn.functional.conv2d): x [N, C, H, W], w [out,
// C/groups, kH, kW], bias [out] or undefined. Under autocast it runs in the
// region's low-precision dtype, as torch.autocast's conv2d.

#include "engine/backend/kernels/conv.h"
#include "engine/core/tensor.h"

namespace ampd::engine::ops {

Tensor Conv2d(Tensor x, Tensor w, Tensor bias, const backend::Conv2dGeometry& g = {});

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_CONV_H_
