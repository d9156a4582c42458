#ifndef AMPD_ENGINE_BACKEND_KERNELS_POOLING_H_
#define AMPD_ENGINE_BACKEND_KERNELS_POOLING_H_

// 2-D pooling over NCHW tensors and its gradient (kernel_registry.h):
// max_pool2d, avg_pool2d and adaptive_avg_pool2d with torch.nn.functional's
// semantics (floor output sizes; padding counted by avg_pool2d unless
// count_include_pad is false; adaptive windows [floor(i*H/OH),
// ceil((i+1)*H/OH))). The window arithmetic is here, once, for every backend.

#include <cstdint>
#include <vector>

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"
#include "engine/ops/pool_window.h"

namespace ampd::engine::backend {

using ops::Pool2dGeometry;
using ops::PoolOutputSize;
using ops::PoolWindow;
using ops::PoolWindowAt;

inline std::vector<int64_t> Pool2dOutputShape(const std::vector<int64_t>& x,
                                              const Pool2dGeometry& g) {
  return {x[0], x[1], PoolOutputSize(g, 0, x[2]), PoolOutputSize(g, 1, x[3])};
}

// y [N, C, OH, OW] from x [N, C, H, W], in `out`. Max returns the first
// maximum of each window (NaN counts as the maximum, as PyTorch's).
struct Pool2dKernel {
  static constexpr const char* kName = "pool2d";
  static constexpr OpId kOps[] = {OpId::kMaxPool2d, OpId::kAvgPool2d, OpId::kAdaptiveAvgPool2d};
  using Fn = Tensor (*)(const Tensor& x, const Pool2dGeometry& g, DType out);
};
// dx [x's shape, x's dtype] from x and dy: max routes each gradient to the
// position the forward chose (recomputed from x), average spreads it.
struct Pool2dBackwardKernel {
  static constexpr const char* kName = "pool2d_backward";
  static constexpr OpId kOps[] = {OpId::kMaxPool2d, OpId::kAvgPool2d, OpId::kAdaptiveAvgPool2d};
  using Fn = Tensor (*)(const Tensor& x, const Tensor& dy, const Pool2dGeometry& g);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_POOLING_H_
