#include "engine/train/explain.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/autograd/autograd.h"
#include "engine/core/error_subject.h"
#include "engine/ops/ops.h"

namespace ampd::engine::train {

using amp::PrecisionConfig;
using autograd::NoGradGuard;
using core::FieldError;
using nn::BuildModel;
using nn::DescribeModel;
using nn::Model;
using nn::ModelShape;
using nn::ModelSpec;
using nn::Parameter;
using nn::ParameterShape;
using ops::AutocastOptions;
using ops::AutocastScope;
using ops::PlanRecorder;
using ops::SoftmaxCrossEntropy;
using optim::OptimizerSpec;

MemoryEstimate EstimateMemory(const ModelSpec& model_spec, const PrecisionConfig& precision,
                              const OptimizerSpec& optimizer, int64_t batch_size) {
  const ModelShape shape = DescribeModel(model_spec);
  MemoryEstimate m;
  for (const ParameterShape& p : shape.parameters) {
    const int64_t n = p.numel();
    const DType dtype =
        p.is_norm && precision.keep_norms_fp32 ? DType::kF32 : precision.param_dtype;
    m.weights_bytes += n * static_cast<int64_t>(DTypeSize(dtype));
    m.gradients_bytes += n * static_cast<int64_t>(DTypeSize(dtype));
    if (precision.master_weights && dtype != DType::kF32) {
      m.master_weights_bytes += n * 4;
      m.gradients_bytes += n * 4;
    }
    // AdamW's two moments or SGD's momentum, each f32 or 8-bit blockwise.
    const int64_t state = optim::StateBytes(optimizer, n, p.layer);
    if (optimizer.kind == OptimizerSpec::Kind::kAdamW) {
      m.optimizer_state_bytes += 2 * state;
    } else if (optimizer.momentum != 0) {
      m.optimizer_state_bytes += state;
    }
  }
  const DType act = precision.autocast ? precision.autocast_dtype : precision.param_dtype;
  m.activation_bytes =
      batch_size * shape.activation_elements_per_example * static_cast<int64_t>(DTypeSize(act));
  return m;
}

absl::StatusOr<PrecisionPlan> ExplainPrecision(const ModelSpec& model_spec,
                                               const PrecisionConfig& precision,
                                               const OptimizerSpec& optimizer, int64_t batch_size) {
  if (batch_size < 1) return FieldError("batch_size", "must be >= 1");
  absl::StatusOr<std::unique_ptr<Model>> model = BuildModel(model_spec, precision, 0);
  if (!model.ok()) return model.status();
  PrecisionPlan plan;
  plan.precision = precision.name;
  // Rows the recorded forward ran on, and what they stand for at batch_size.
  int64_t rows = 0, rows_at_batch = 0;
  {
    // A few rows are enough to walk every op; no gradients are needed. The
    // training forward: dropout (pass-through under autocast) is one of its
    // ops, and batch norm normalises by the batch's statistics.
    NoGradGuard no_grad;
    PlanRecorder recorder;
    AutocastOptions region;
    region.enabled = precision.autocast;
    region.dtype = precision.autocast_dtype;
    region.overrides = precision.overrides;
    AutocastScope scope(region);
    if (nn::Classifier* c = (*model)->AsClassifier()) {
      rows = 2;
      rows_at_batch = batch_size;
      Tensor x = Tensor::Zeros({rows, c->input_dim()}, DType::kF32);
      Tensor logits = c->Forward(x, /*training=*/true, 0);
      SoftmaxCrossEntropy(logits, {0, 0});
    } else if (nn::LanguageModel* lm = (*model)->AsLanguageModel()) {
      // One short window: every op of every block, the fused attention and
      // the fused head + loss, each once per layer.
      const int64_t t = std::min<int64_t>(lm->block_size(), 4);
      rows = t;
      rows_at_batch = batch_size * lm->block_size();
      const std::vector<int32_t> tokens(t, 0);
      lm->Loss(tokens, tokens, 1, t, /*training=*/true, 0);
    }
    plan.ops = recorder.entries();
  }
  for (ops::PlanEntry& e : plan.ops) {
    // Per-row outputs scale with the rows; a loss (a scalar) does not.
    if (!e.output_shape.empty() && e.output_shape[0] == rows) {
      e.output_bytes = e.output_bytes / rows * rows_at_batch;
    }
  }
  for (const Parameter& p : (*model)->parameters()) plan.parameter_count += p.value.numel();
  plan.memory = EstimateMemory(model_spec, precision, optimizer, batch_size);
  return plan;
}

std::string DescribeOptimizer(const ModelSpec& model, const OptimizerSpec& o) {
  std::string out =
      o.kind == OptimizerSpec::Kind::kAdamW
          ? absl::StrFormat("AdamW lr %g, betas (%g, %g), eps %g", o.lr, o.beta1, o.beta2, o.eps)
          : absl::StrFormat("SGD lr %g, momentum %g%s", o.lr, o.momentum,
                            o.nesterov ? ", nesterov" : "");
  const std::vector<ParameterShape> parameters = DescribeModel(model).parameters;
  if (o.state_bits == 8) {
    int64_t eight = 0, f32 = 0;
    for (const ParameterShape& p : parameters) {
      (optim::UsesEightBitStates(o, p.numel(), p.layer) ? eight : f32) += 1;
    }
    absl::StrAppendFormat(&out,
                          ", 8-bit blockwise states on %d tensors (bitsandbytes' dynamic maps, "
                          "blocks of 256), f32 states on %d",
                          eight, f32);
  }
  if (o.weight_decay == 0) return out + ", no weight decay";
  int64_t decayed_tensors = 0, decayed = 0, kept_tensors = 0, kept = 0;
  std::vector<std::string> kept_names;  // with block indices folded: h.*.ln_1.weight
  for (const ParameterShape& p : parameters) {
    if (p.weight_decay) {
      ++decayed_tensors;
      decayed += p.numel();
      continue;
    }
    ++kept_tensors;
    kept += p.numel();
    std::string name = p.name;
    if (name.rfind("h.", 0) == 0) {
      const size_t dot = name.find('.', 2);
      if (dot != std::string::npos) name = "h.*" + name.substr(dot);
    }
    if (std::find(kept_names.begin(), kept_names.end(), name) == kept_names.end()) {
      kept_names.push_back(name);
    }
  }
  absl::StrAppendFormat(&out, ", weight decay %g on %d tensors (%d parameters)", o.weight_decay,
                        decayed_tensors, decayed);
  if (kept_tensors > 0) {
    absl::StrAppendFormat(&out, ", none on %d tensors (%d parameters: %s)", kept_tensors, kept,
                          absl::StrJoin(kept_names, ", "));
  }
  return out;
}

}  // namespace ampd::engine::train
