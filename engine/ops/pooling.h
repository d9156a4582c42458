#ifndef AMPD_ENGINE_OPS_POOLING_H_
#define AMPD_ENGINE_OPS_POOLING_H_

// 2-D pooling over NCHW tensors, torch.nn.functional's max_pool2d,
// avg_pool2d and adaptive_avg_pool2d (pool_window.h has the window
// arithmetic). They run in their input's dtype.

#include "engine/core/tensor.h"
#include "engine/ops/pool_window.h"

namespace ampd::engine::ops {

// g.op says which; its fields as Pool2dGeometry documents.
Tensor Pool2d(Tensor x, const Pool2dGeometry& g);

// stride 0 means the kernel size (PyTorch's default).
Tensor MaxPool2d(Tensor x, int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                 int64_t dilation = 1);
Tensor AvgPool2d(Tensor x, int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                 bool count_include_pad = true);
Tensor AdaptiveAvgPool2d(Tensor x, int64_t out_h, int64_t out_w);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_POOLING_H_
