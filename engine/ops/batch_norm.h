#ifndef AMPD_ENGINE_OPS_BATCH_NORM_H_
#define AMPD_ENGINE_OPS_BATCH_NORM_H_

// Batch normalisation over channels (torch.nn.functional.batch_norm): x
// [N, C, H, W] or [N, C]; gamma, beta, running_mean, running_var [C]. Under
// autocast it runs in f32 (its output is f32), and the running statistics are
// never autocast: they stay in the dtype they were made in (f32; the models
// never make them f16).

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// Training: normalises with the batch's statistics and updates the running
// ones in place (momentum 0.1 as PyTorch's default); eval: uses the running ones.
Tensor BatchNorm(Tensor x, Tensor gamma, Tensor beta, const Tensor& running_mean,
                 const Tensor& running_var, bool training, double momentum = 0.1,
                 double eps = 1e-5);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_BATCH_NORM_H_
