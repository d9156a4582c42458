#ifndef AMPD_ENGINE_NN_MODEL_H_
#define AMPD_ENGINE_NN_MODEL_H_

// Declarative models. A ModelSpec names an architecture and its sizes; Build()
// turns it into parameters plus a forward function. The MLP is the first;
// the spec is a variant so a GPT-style transformer (embedding, attention,
// layer norm, GELU MLP) slots in beside it without changing callers.

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine {

enum class Activation { kRelu, kGelu };

struct MlpSpec {
  int64_t input_dim = 784;
  std::vector<int64_t> hidden = {256, 256};
  int64_t num_classes = 10;
  Activation activation = Activation::kRelu;
  bool layer_norm = false;  // after each hidden linear, before the activation
  double dropout = 0.0;     // after each hidden activation
};

using ModelSpec = std::variant<MlpSpec>;

// Names the offending field ("model.mlp.hidden[1]: must be > 0, got -3").
absl::Status ValidateModelSpec(const ModelSpec& spec);

struct Parameter {
  std::string name;   // "fc1.weight", "norm1.bias", "head.weight", ...
  std::string layer;  // "fc1", "norm1", "head"
  bool is_norm = false;
  Tensor value;  // in the model's compute dtype (requires grad)
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
                                                  const PrecisionConfig& precision, uint64_t seed);

int64_t ParameterCount(const ModelSpec& spec);

// The ops a model's forward and backward run (each with its gradient), so a
// device can be checked for kernels before a job is accepted.
std::vector<OpId> ModelOps(const ModelSpec& spec);

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_NN_MODEL_H_
