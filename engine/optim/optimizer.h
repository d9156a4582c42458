#ifndef AMPD_ENGINE_OPTIM_OPTIMIZER_H_
#define AMPD_ENGINE_OPTIM_OPTIMIZER_H_

// SGD and AdamW with f32 state, applied to f32 master weights when the
// precision keeps them (the low-precision model copy is refreshed after each
// step), otherwise to the parameters themselves. Learning-rate schedules.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/tensor.h"
#include "engine/nn/model.h"

namespace ampd::engine::optim {

struct OptimizerSpec {
  enum class Kind { kSgd, kAdamW };
  Kind kind = Kind::kAdamW;
  double lr = 1e-3;
  double weight_decay = 0.0;
  // SGD
  double momentum = 0.0;
  bool nesterov = false;
  // AdamW
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // 8: AdamW's moments (or SGD's momentum) as blockwise-quantized 8-bit
  // states (bitsandbytes' method, backend/quant_map.h); 32: f32 states.
  int state_bits = 32;
  // With 8-bit states: tensors with fewer elements (biases, norms) keep f32
  // states, as bitsandbytes' min_8bit_size; and so do these layers
  // (embeddings, as StableEmbedding does).
  int64_t min_8bit_size = 4096;
  std::set<std::string> fp32_state_layers;
};

// Whether a parameter of `numel` elements in `layer` gets 8-bit states.
bool UsesEightBitStates(const OptimizerSpec& spec, int64_t numel, const std::string& layer);
// The bytes of one optimizer state of a parameter: 4 per element in f32, or
// 1 per element plus 4 per kQuantBlock elements in 8 bits.
int64_t StateBytes(const OptimizerSpec& spec, int64_t numel, const std::string& layer);

struct ScheduleSpec {
  enum class Kind { kConstant, kWarmupCosine };
  Kind kind = Kind::kConstant;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;  // cosine floor, as a fraction of lr
};

absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec);

// lr at optimizer step `step` (0-based) of `total_steps`. Linear warmup from
// lr/warmup to lr, then cosine decay to lr * min_lr_ratio.
double ScheduledLearningRate(const ScheduleSpec& schedule, double base_lr, int64_t step,
                             int64_t total_steps);

class Optimizer {
 public:
  Optimizer(const OptimizerSpec& spec, std::vector<nn::Parameter>* params, bool master_weights);

  // The gradients the step will use, as f32 (or the param dtype without
  // master weights). With master weights these are fresh f32 copies of the
  // model gradients. Unscaling and clipping work on these in place.
  std::vector<Tensor> CollectGradients();
  std::vector<std::string> ParameterNames() const;
  // Applies one update with `lr` using the last collected gradients.
  void Step(double lr);
  // The device path: one fused update per parameter that skips by itself when
  // found_inf (if defined) is non-zero, and writes the model copy in the same
  // pass. The step counts as taken; call UndoSkippedStep() once the host
  // learns it was skipped (it reads the flag with the step's metrics).
  void StepFused(double lr, const Tensor& found_inf);
  void UndoSkippedStep() { --steps_; }
  void ZeroGrad();
  int64_t steps_taken() const { return steps_; }
  // The weights the optimizer updates (master copies, or the parameters).
  const std::vector<Tensor>& updated_weights() const { return weights_; }

  // Checkpointing: every tensor of optimizer state by name ("master/NAME",
  // "exp_avg/NAME", "exp_avg_sq/NAME", "momentum/NAME"; 8-bit states as
  // "exp_avg.codes/NAME" (u8) and "exp_avg.absmax/NAME" (f32), with the code
  // maps themselves as "quant_map/<name>"), and the step count. Load copies
  // values in; names, shapes and dtypes must match, and so must the maps.
  std::vector<std::pair<std::string, Tensor>> StateTensors() const;
  // What LoadState checks, without changing anything: a caller restoring
  // more than the optimizer checks all of it before it copies any of it.
  absl::Status CheckState(const std::vector<std::pair<std::string, Tensor>>& tensors,
                          int64_t steps_taken) const;
  absl::Status LoadState(const std::vector<std::pair<std::string, Tensor>>& tensors,
                         int64_t steps_taken);
  // The bytes of optimizer state allocated (moments / momentum; not master
  // weights): what 8-bit states save.
  int64_t state_bytes() const;
  bool has_8bit_states() const;

 private:
  OptimizerSpec spec_;
  std::vector<nn::Parameter>* params_;
  bool master_;
  std::vector<Tensor> weights_;  // master f32 copies, or aliases of the params
  std::vector<Tensor> grads_;
  std::vector<Tensor> buf1_, buf2_;  // momentum, or AdamW's exp_avg / exp_avg_sq
  // 8-bit states instead of buf1_/buf2_ (undefined for f32 states).
  std::vector<Tensor> codes1_, absmax1_, codes2_, absmax2_;
  std::vector<std::pair<std::string, Tensor>> quant_maps_;  // when any is 8-bit
  Tensor device_step_;  // StepFused: applied steps, on the device
  int64_t steps_ = 0;
};

}  // namespace ampd::engine::optim

#endif  // AMPD_ENGINE_OPTIM_OPTIMIZER_H_
