#ifndef AMPD_ENGINE_NN_MODEL_H_
#define AMPD_ENGINE_NN_MODEL_H_

// Declarative models. A ModelSpec names an architecture and its sizes. Each
// architecture lives in its own files (mlp.h) and says, from its spec alone,
// what it is (DescribeModel: every parameter's shape, the activations it
// keeps, the ops it runs); parameter counts, memory estimates, the explain
// plan and the device's kernel check all read that one description.
// BuildModel turns the spec into parameters plus a forward function. Callers
// use the functions here, never std::get on the variant, so a new
// architecture slots in beside the MLP without changing them.

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/core/tensor.h"
#include "engine/nn/mlp.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::nn {

using ModelSpec = std::variant<MlpSpec>;

// One parameter tensor, as the model will create it.
struct ParameterShape {
  std::string name;   // "fc1.weight"
  std::string layer;  // "fc1"
  std::vector<int64_t> shape;
  bool is_norm = false;
  // PyTorch's default initialisation of its layer: nn.Linear's
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)), or a norm's ones (weight) and zeros;
  // or N(0, std^2) (GPT-2's).
  enum class Init { kUniformFanIn, kOnes, kZeros, kNormal } init = Init::kUniformFanIn;
  int64_t fan_in = 0;
  double std = 0;  // kNormal
  int64_t numel() const;
};

struct ModelShape {
  std::vector<ParameterShape> parameters;  // in the model's order
  // Elements saved for the backward, per example (memory estimates).
  int64_t activation_elements_per_example = 0;
  // The ops its forward and backward run (each with its gradient), so a
  // device can be checked for kernels before a job is accepted.
  std::vector<OpId> ops;
  int64_t parameter_count() const;
};

ModelShape DescribeModel(const ModelSpec& spec);

// Names the offending field ("model.mlp.hidden[1]: must be > 0, got -3").
absl::Status ValidateModelSpec(const ModelSpec& spec);

struct Parameter {
  std::string name;   // "fc1.weight", "norm1.bias", "head.weight", ...
  std::string layer;  // "fc1", "norm1", "head"
  bool is_norm = false;
  Tensor value;  // in the model's compute dtype (requires grad)
  // Whether the optimizer's weight decay applies to it: every parameter of
  // the MLP (torch.optim's default); a GPT's 2-D weights only, not its
  // biases, norms or embeddings (nanoGPT's and llm.c's convention).
  bool weight_decay = true;
};

class Model {
 public:
  virtual ~Model() = default;
  // Logits [batch, num_classes] for features [batch, input_dim].
  virtual Tensor Forward(const Tensor& x, bool training, uint64_t dropout_seed) = 0;
  virtual std::vector<Parameter>& parameters() = 0;
  virtual int64_t input_dim() const = 0;
  virtual int64_t num_classes() const = 0;
  // Per-example activation elements saved for backward, for memory estimates.
  virtual int64_t activation_elements_per_example() const = 0;
};

// Parameters are initialised in f32 from `seed` (PyTorch's nn.Linear default:
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases; ones/zeros for
// norms), then cast to the precision's param dtype (norms stay f32 when the
// precision keeps them).
absl::StatusOr<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec,
                                                  const amp::PrecisionConfig& precision,
                                                  uint64_t seed);

int64_t ParameterCount(const ModelSpec& spec);
std::vector<OpId> ModelOps(const ModelSpec& spec);

// The input and output widths, which a spec may leave to the data (0).
bool DataDimsKnown(const ModelSpec& spec);
// Fills the widths the spec left open from the data.
void FillDataDims(ModelSpec* spec, int64_t feature_dim, int64_t num_classes);
// INVALID_ARGUMENT naming the field when the data does not fit the model.
absl::Status CheckDataDims(const ModelSpec& spec, int64_t feature_dim, int64_t num_classes);

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_MODEL_H_
