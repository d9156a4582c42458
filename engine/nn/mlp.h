#ifndef AMPD_ENGINE_NN_MLP_H_
#define AMPD_ENGINE_NN_MLP_H_

// The MLP: [Linear -> (LayerNorm) -> activation -> (Dropout)] per hidden
// width, then a Linear head. Its spec, its shape (every parameter, the
// activations it keeps, the ops it runs) and its module; engine/nn/model.h
// dispatches to it.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "engine/amp/precision.h"

namespace ampd::engine::nn {

enum class Activation { kRelu, kGelu };

struct MlpSpec {
  int64_t input_dim = 784;  // 0: taken from the data
  std::vector<int64_t> hidden = {256, 256};
  int64_t num_classes = 10;  // 0: taken from the data
  Activation activation = Activation::kRelu;
  bool layer_norm = false;  // after each hidden linear, before the activation
  double dropout = 0.0;     // after each hidden activation
};

struct ModelShape;
class Model;

// Widths up to 2^24 keep every layer's parameter count (a product of two)
// and the model's sum far inside int64.
inline constexpr int64_t kMaxMlpWidth = int64_t{1} << 24;
absl::Status ValidateMlp(const MlpSpec& spec);
ModelShape DescribeMlp(const MlpSpec& spec);
std::unique_ptr<Model> BuildMlp(const MlpSpec& spec, const amp::PrecisionConfig& precision,
                                uint64_t seed);

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_MLP_H_
