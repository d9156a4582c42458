#ifndef AMPD_ENGINE_OPS_LINEAR_H_
#define AMPD_ENGINE_OPS_LINEAR_H_

// GEMM ops: matmul and linear (lower precision under autocast).

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// a [M, K] @ b [K, N].
Tensor Matmul(Tensor a, Tensor b);
// x [M, in] @ w[out, in]^T + b[out] (b may be undefined), as torch.nn.functional.linear.
Tensor Linear(Tensor x, Tensor w, Tensor b);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_LINEAR_H_
