#ifndef AMPD_ENGINE_NN_MODULE_H_
#define AMPD_ENGINE_NN_MODULE_H_

// What every model is made of, whatever its architecture: its parameters (as
// described from the spec, and as built) and the two kinds of model the
// trainer runs. A Classifier maps features to class logits; a LanguageModel
// maps token windows to a next-token loss. The trainer asks which one a
// model is (AsClassifier / AsLanguageModel) and feeds it the matching data.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/nn/fp8_state.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::nn {

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
  // Whether the optimizer's weight decay applies (see Parameter).
  bool weight_decay = true;
  int64_t numel() const;
};

struct ModelShape {
  std::vector<ParameterShape> parameters;  // in the model's order
  // Elements saved for the backward, per example (memory estimates).
  int64_t activation_elements_per_example = 0;
  // The ops its forward and backward run (each with its gradient), so a
  // device can be checked for kernels before a job is accepted.
  std::vector<OpId> ops;
  // Model FLOPs per trained example, forward and backward (MFU): 6 per
  // parameter per token, plus a transformer's attention (6N + 12LTC per token).
  double flops_per_example = 0;
  // State that is not trained (batch norm's running_mean and running_var),
  // in the model's order: made f32 in every precision.
  std::vector<ParameterShape> buffers;
  // Tokens per example: a language model's block_size; 0 for a classifier.
  int64_t tokens_per_example = 0;
  int64_t parameter_count() const;
};

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

class Classifier;
class LanguageModel;

class Model {
 public:
  virtual ~Model() = default;
  virtual std::vector<Parameter>& parameters() = 0;
  // Per-example activation elements saved for backward, for memory estimates
  // (an example is a sequence for a language model).
  virtual int64_t activation_elements_per_example() const = 0;
  // Which kind of model this is: exactly one is non-null.
  virtual Classifier* AsClassifier() { return nullptr; }
  virtual LanguageModel* AsLanguageModel() { return nullptr; }
  // The scaling state of its FP8 GEMMs; null when it runs none.
  virtual Fp8State* fp8() { return nullptr; }
  // Its buffers (ModelShape::buffers), f32, updated by the forward in
  // training; checkpoints and weights files keep them with the parameters.
  std::vector<Parameter>& buffers() { return buffers_; }

 private:
  std::vector<Parameter> buffers_;
};

class Classifier : public Model {
 public:
  // Logits [batch, num_classes] for features [batch, input_dim].
  virtual Tensor Forward(const Tensor& x, bool training, uint64_t dropout_seed) = 0;
  virtual int64_t input_dim() const = 0;
  virtual int64_t num_classes() const = 0;
  Classifier* AsClassifier() final { return this; }
};

class LanguageModel : public Model {
 public:
  // Mean cross-entropy (nats per token) of `targets` given `tokens`, both
  // [batch * seq_len] row-major windows, seq_len <= block_size().
  virtual Tensor Loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                      int64_t batch, int64_t seq_len, bool training, uint64_t dropout_seed) = 0;
  // Logits [batch * seq_len, vocab_size].
  virtual Tensor Logits(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq_len,
                        bool training, uint64_t dropout_seed) = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t block_size() const = 0;
  LanguageModel* AsLanguageModel() final { return this; }
};

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_MODULE_H_
