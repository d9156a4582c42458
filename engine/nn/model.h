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
#include "engine/nn/gpt.h"
#include "engine/nn/mlp.h"
#include "engine/nn/module.h"
#include "engine/nn/sequential.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::nn {

using ModelSpec = std::variant<MlpSpec, GptSpec, SequentialSpec>;

ModelShape DescribeModel(const ModelSpec& spec);

// Names the offending field ("model.mlp.hidden[1]: must be > 0, got -3").
absl::Status ValidateModelSpec(const ModelSpec& spec);

// Parameters are initialised in f32 from `seed` (PyTorch's nn.Linear default:
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases; ones/zeros for
// norms), then cast to the precision's param dtype (norms stay f32 when the
// precision keeps them).
absl::StatusOr<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec,
                                                  const amp::PrecisionConfig& precision,
                                                  uint64_t seed);

int64_t ParameterCount(const ModelSpec& spec);
// A classifier's parameters as PyTorch initialises its layers, drawn from
// `seed` in parameter order: nn.Linear's and nn.Conv2d's U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5)), norms' ones and zeros;
// in the precision's param dtype (norms f32 when it keeps them).
std::vector<Parameter> InitParameters(const std::vector<ParameterShape>& shapes,
                                      const amp::PrecisionConfig& precision, uint64_t seed);
// Whether the spec is a language model (trained on token windows) rather
// than a classifier (features and labels).
bool IsLanguageModel(const ModelSpec& spec);
std::vector<OpId> ModelOps(const ModelSpec& spec);

// The input and output widths, which a spec may leave to the data (0).
bool DataDimsKnown(const ModelSpec& spec);
// Fills the widths the spec left open from the data; `example_shape` is one
// example's ([1, 28, 28] for IDX images; empty: [feature_dim]).
void FillDataDims(ModelSpec* spec, int64_t feature_dim, int64_t num_classes,
                  const std::vector<int64_t>& example_shape = {});
// INVALID_ARGUMENT naming the field when the data does not fit the model.
absl::Status CheckDataDims(const ModelSpec& spec, int64_t feature_dim, int64_t num_classes);

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_MODEL_H_
