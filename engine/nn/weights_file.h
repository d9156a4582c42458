#ifndef AMPD_ENGINE_NN_WEIGHTS_FILE_H_
#define AMPD_ENGINE_NN_WEIGHTS_FILE_H_

// How a model's parameters are named and laid out in a weights file (a
// safetensors file: JobSpec.init_from, a job's final weights). One layout per
// architecture, the one its users' tools read and write:
//
//  * MLP: the parameter names ("fc1.weight", ...) in nn.Linear's [out, in].
//  * Sequential: torch.nn.Sequential's state_dict: "0.weight" (conv2d's
//    [out, in/groups, kH, kW], linear's [out, in]), batch norm's weight,
//    bias, running_mean and running_var (its num_batches_tracked is ignored
//    on import and not written: torch's BatchNorm fills it in on load).
//  * GPT: Hugging Face GPT-2's (GPT2Model / GPT2LMHeadModel). The names are
//    the model's own (`wte.weight`, `h.N.attn.c_attn.weight`, ...), with or
//    without the `transformer.` prefix; the four block linears (attn.c_attn,
//    attn.c_proj, mlp.c_fc, mlp.c_proj) hold Conv1D's [in, out] transpose of
//    nn.Linear's weight; the causal-mask buffers `h.N.attn.bias` and
//    `h.N.attn.masked_bias` are ignored; `lm_head.weight` is the head (when
//    the model ties it to wte, a copy equal to wte.weight is accepted). An
//    export adds GPT-2's config.json to the header's metadata ("config"), so
//    `GPT2LMHeadModel` loads it from that config and the file.
//    Files ampd wrote before it used this layout (block linears as [out, in])
//    are recognised by h.0.attn.c_attn.weight's [3C, C] shape and still read.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/io/safetensors.h"
#include "engine/nn/model.h"

namespace ampd::engine::nn {

// Where one of the model's parameters is in a file.
struct WeightSource {
  std::string param;        // the model's name ("h.0.attn.c_attn.weight")
  std::string tensor;       // the file's ("transformer.h.0.attn.c_attn.weight")
  bool transposed = false;  // the file holds its [in, out] transpose
};

// Matches a file's tensors (its header entries) to the model's parameters:
// one source per parameter, in the model's order. INVALID_ARGUMENT, its
// message starting with `path`, on the first tensor missing, unexpected,
// duplicated, not floating-point, or of another shape than the layout's
// (both shapes named, the file's layout said).
absl::StatusOr<std::vector<WeightSource>> MatchWeightsFile(
    const ModelSpec& model, const std::vector<io::SafetensorsEntry>& file, const std::string& path);

// The parameters' values from a whole file (matched as above), by parameter
// name, in the model's layout and the file's dtypes. A tied model's
// lm_head.weight that differs from wte.weight is INVALID_ARGUMENT.
absl::StatusOr<std::map<std::string, Tensor>> ImportWeights(const ModelSpec& model,
                                                            const io::SafetensorsFile& file,
                                                            const std::string& path);

// What a weights file holds for the parameters (CPU tensors, by name, any
// dtype): the tensors in the architecture's layout and the header metadata.
struct WeightsFileContents {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};
WeightsFileContents ExportWeights(const ModelSpec& model,
                                  const std::vector<std::pair<std::string, Tensor>>& params);

// GPT-2's config.json for a GPT spec (what transformers' GPT2Config reads).
std::string Gpt2ConfigJson(const GptSpec& spec);

// The [cols, rows] transpose of a 2-D CPU tensor, any dtype.
Tensor Transpose2d(const Tensor& t);

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_WEIGHTS_FILE_H_
