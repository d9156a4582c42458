#ifndef AMPD_ENGINE_TRAIN_EXPLAIN_H_
#define AMPD_ENGINE_TRAIN_EXPLAIN_H_

// What a precision config does to a model, as data: the per-op dtype plan
// (recorded from a real forward pass, so it cannot drift from execution) and
// a memory estimate.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/nn/model.h"
#include "engine/ops/autocast.h"
#include "engine/optim/optimizer.h"

namespace ampd::engine::train {

struct MemoryEstimate {
  int64_t weights_bytes = 0;          // the parameters the model computes with
  int64_t master_weights_bytes = 0;   // f32 master copies (O2-style)
  int64_t gradients_bytes = 0;        // model grads (+ f32 master grads)
  int64_t optimizer_state_bytes = 0;  // AdamW moments / SGD momentum, f32
  int64_t activation_bytes = 0;       // saved for backward, at `batch_size`
  int64_t total_bytes() const {
    return weights_bytes + master_weights_bytes + gradients_bytes + optimizer_state_bytes +
           activation_bytes;
  }
};

struct PrecisionPlan {
  std::string precision;
  std::vector<ops::PlanEntry> ops;  // forward pass and loss, in execution order
  MemoryEstimate memory;
  int64_t parameter_count = 0;
};

// The memory estimate alone, computed from the spec without building the
// model (cheap enough to check every job against a limit before queueing).
MemoryEstimate EstimateMemory(const nn::ModelSpec& model, const amp::PrecisionConfig& precision,
                              const optim::OptimizerSpec& optimizer, int64_t batch_size);

// The optimizer as a job runs it, in one line, with its weight-decay groups:
// "AdamW lr 0.001, betas (0.9, 0.99), eps 1e-08, weight decay 0.1 on 16
// tensors (3145728 parameters), none on 34 tensors (... : wte.weight,
// h.*.ln_1.weight, ...)" (block indices folded into h.*).
std::string DescribeOptimizer(const nn::ModelSpec& model, const optim::OptimizerSpec& optimizer);

absl::StatusOr<PrecisionPlan> ExplainPrecision(const nn::ModelSpec& model,
                                               const amp::PrecisionConfig& precision,
                                               const optim::OptimizerSpec& optimizer,
                                               int64_t batch_size);

}  // namespace ampd::engine::train

#endif  // AMPD_ENGINE_TRAIN_EXPLAIN_H_
