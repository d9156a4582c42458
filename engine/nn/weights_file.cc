#include "engine/nn/weights_file.h"

#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ampd::engine::nn {

namespace {

constexpr char kPrefix[] = "transformer.";

std::string ShapeText(const std::vector<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

std::vector<int64_t> Reversed(std::vector<int64_t> shape) { return {shape.rbegin(), shape.rend()}; }

bool IsFloating(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}

// HF's Conv1D layers: their weights are stored [in, out].
bool IsConv1dWeight(const std::string& name) {
  for (const char* layer :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    if (absl::EndsWith(name, layer)) return true;
  }
  return false;
}

// "h.N.attn.bias" / "h.N.attn.masked_bias": GPT-2's causal-mask buffers.
bool IsMaskBuffer(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  int n = 0;
  return parts.size() == 4 && parts[0] == "h" && absl::SimpleAtoi(parts[1], &n) &&
         parts[2] == "attn" && (parts[3] == "bias" || parts[3] == "masked_bias");
}

// One expected tensor: a parameter and its shape in the file.
struct Expected {
  std::string param;
  std::vector<int64_t> file_shape;
  bool transposed = false;
};

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, what));
}

}  // namespace

Tensor Transpose2d(const Tensor& t) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const size_t es = DTypeSize(t.dtype());
  Tensor out = Tensor::Uninitialized({cols, rows}, t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(dst + (c * rows + r) * es, src + (r * cols + c) * es, es);
    }
  }
  return out;
}

absl::StatusOr<std::vector<WeightSource>> MatchWeightsFile(
    const ModelSpec& model, const std::vector<io::SafetensorsEntry>& file,
    const std::string& path) {
  const GptSpec* gpt = std::get_if<GptSpec>(&model);
  // The file's tensors by the name they are matched under (the prefix off).
  std::map<std::string, const io::SafetensorsEntry*> in_file;
  for (const io::SafetensorsEntry& e : file) {
    std::string name = e.name;
    if (gpt != nullptr && absl::StartsWith(name, kPrefix)) name = name.substr(strlen(kPrefix));
    if (gpt != nullptr && IsMaskBuffer(name)) continue;
    // BatchNorm's step counter (an int64 torch keeps; momentum does not use it).
    if (gpt == nullptr && absl::EndsWith(name, ".num_batches_tracked")) continue;
    auto [it, inserted] = in_file.emplace(name, &e);
    if (!inserted) {
      return Invalid(path, absl::StrCat(" has both ", it->second->name, " and ", e.name,
                                        ": one tensor under two names"));
    }
  }
  // The layout: HF GPT-2's Conv1D transposes, unless the file is one of
  // ampd's older [out, in] exports (c_attn's [3C, C] tells them apart).
  bool conv1d = gpt != nullptr;
  if (gpt != nullptr) {
    auto it = in_file.find("h.0.attn.c_attn.weight");
    if (it != in_file.end() &&
        it->second->shape == std::vector<int64_t>{3 * gpt->n_embd, gpt->n_embd}) {
      conv1d = false;
    }
  }
  const char* layout_note = conv1d ? " (Hugging Face GPT-2's Conv1D layout: [in, out])" : "";
  std::vector<Expected> expected;
  const ModelShape shape = DescribeModel(model);
  for (const ParameterShape& p : shape.parameters) {
    const bool t = conv1d && IsConv1dWeight(p.name);
    expected.push_back({p.name, t ? Reversed(p.shape) : p.shape, t});
  }
  // Buffers (batch norm's running_mean and running_var) travel with the
  // parameters, as in a torch state_dict.
  for (const ParameterShape& b : shape.buffers) expected.push_back({b.name, b.shape, false});
  std::vector<WeightSource> sources;
  for (const Expected& want : expected) {
    auto it = in_file.find(want.param);
    if (it == in_file.end()) {
      return Invalid(
          path, absl::StrCat(" has no tensor ", want.param, " (shape ", ShapeText(want.file_shape),
                             " in the model", want.transposed ? layout_note : "", ")"));
    }
    const io::SafetensorsEntry& e = *it->second;
    if (!IsFloating(e.dtype)) {
      return Invalid(path,
                     absl::StrCat(": tensor ", e.name, " is ", std::string(DTypeName(e.dtype)),
                                  ", not a floating-point dtype"));
    }
    if (e.shape != want.file_shape) {
      return Invalid(path, absl::StrCat(": tensor ", e.name, " has shape ", ShapeText(e.shape),
                                        " in the file and ", ShapeText(want.file_shape),
                                        " in the model", want.transposed ? layout_note : ""));
    }
    sources.push_back({want.param, e.name, want.transposed});
    in_file.erase(it);
  }
  // A tied head's copy (GPT2LMHeadModel's state_dict has it).
  if (gpt != nullptr && gpt->tie_embeddings) {
    auto it = in_file.find("lm_head.weight");
    if (it != in_file.end()) {
      const std::vector<int64_t> want = {gpt->vocab_size, gpt->n_embd};
      if (it->second->shape != want) {
        return Invalid(path, absl::StrCat(": tensor lm_head.weight has shape ",
                                          ShapeText(it->second->shape), " in the file and ",
                                          ShapeText(want), " in the model (tied to wte.weight)"));
      }
      in_file.erase(it);
    }
  }
  if (!in_file.empty()) {
    const io::SafetensorsEntry& e = *in_file.begin()->second;
    return Invalid(path, absl::StrCat(" has a tensor the model does not: ", e.name, " (shape ",
                                      ShapeText(e.shape), ")"));
  }
  return sources;
}

absl::StatusOr<std::map<std::string, Tensor>> ImportWeights(const ModelSpec& model,
                                                            const io::SafetensorsFile& file,
                                                            const std::string& path) {
  std::vector<io::SafetensorsEntry> entries;
  for (const std::string& name : file.names) {
    const Tensor& t = file.tensors.at(name);
    entries.push_back({name, t.dtype(), t.shape()});
  }
  absl::StatusOr<std::vector<WeightSource>> sources = MatchWeightsFile(model, entries, path);
  if (!sources.ok()) return sources.status();
  std::map<std::string, Tensor> out;
  for (const WeightSource& s : *sources) {
    const Tensor& t = file.tensors.at(s.tensor);
    out[s.param] = s.transposed ? Transpose2d(t) : t;
  }
  // A tied head's copy must be the embedding: else the file is of an untied
  // model, and dropping its head would change what it computes.
  const GptSpec* gpt = std::get_if<GptSpec>(&model);
  if (gpt != nullptr && gpt->tie_embeddings) {
    for (const char* name : {"lm_head.weight", "transformer.lm_head.weight"}) {
      auto it = file.tensors.find(name);
      if (it == file.tensors.end()) continue;
      if (it->second.ToDoubles() != out.at("wte.weight").ToDoubles()) {
        return Invalid(path, absl::StrCat(": tensor ", name,
                                          " differs from wte.weight, and the model ties them "
                                          "(model.gpt.tie_embeddings; set it false to keep both)"));
      }
    }
  }
  return out;
}

std::string Gpt2ConfigJson(const GptSpec& s) {
  // transformers' GPT2Config fields; n_inner null = 4 * n_embd.
  const std::string p = absl::StrCat(s.dropout);
  // GPT-2's tokenizer's <|endoftext|>, when the vocabulary has it.
  const std::string eot = s.vocab_size > 50256 ? "50256" : "null";
  return absl::StrCat(
      "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"vocab_size\": ",
      s.vocab_size, ", \"n_positions\": ", s.block_size, ", \"n_ctx\": ", s.block_size,
      ", \"n_embd\": ", s.n_embd, ", \"n_layer\": ", s.n_layer, ", \"n_head\": ", s.n_head,
      ", \"n_inner\": null, \"activation_function\": \"",
      s.activation == GptSpec::Activation::kGeluTanh ? "gelu_new" : "gelu",
      // One dropout for all three (GptSpec::dropout), as nanoGPT.
      "\", \"resid_pdrop\": ", p, ", \"embd_pdrop\": ", p, ", \"attn_pdrop\": ", p,
      ", \"layer_norm_epsilon\": 1e-05, \"initializer_range\": 0.02, \"scale_attn_weights\": "
      "true, \"bos_token_id\": ",
      eot, ", \"eos_token_id\": ", eot,
      ", \"tie_word_embeddings\": ", s.tie_embeddings ? "true" : "false",
      ", \"ampd_bias\": ", s.bias ? "true" : "false", "}");
}

WeightsFileContents ExportWeights(const ModelSpec& model,
                                  const std::vector<std::pair<std::string, Tensor>>& params) {
  WeightsFileContents out;
  out.metadata["format"] = "pt";
  const GptSpec* gpt = std::get_if<GptSpec>(&model);
  if (gpt == nullptr) {
    out.tensors = params;
    return out;
  }
  out.metadata["config"] = Gpt2ConfigJson(*gpt);
  for (const auto& [name, t] : params) {
    out.tensors.emplace_back(name, IsConv1dWeight(name) ? Transpose2d(t) : t);
  }
  return out;
}

}  // namespace ampd::engine::nn
