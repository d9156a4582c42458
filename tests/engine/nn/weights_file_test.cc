// Weights files (engine/nn/weights_file.h): Hugging Face GPT-2's layout in
// both directions (Conv1D transposes, the transformer. prefix, the mask
// buffers, a tied head's copy), ampd's older [out, in] GPT files, the MLP's
// plain names, and every mismatch named with the tensor and both shapes.

#include "engine/nn/weights_file.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ampd::engine::nn {
namespace {

GptSpec Tiny() {
  GptSpec s;
  s.vocab_size = 10;
  s.block_size = 4;
  s.n_layer = 1;
  s.n_head = 2;
  s.n_embd = 4;
  return s;
}

// Distinct values for every parameter, in the model's [out, in] layout.
std::vector<std::pair<std::string, Tensor>> Params(const ModelSpec& m) {
  std::vector<std::pair<std::string, Tensor>> t;
  double v = 0;
  for (const ParameterShape& p : DescribeModel(m).parameters) {
    std::vector<double> values(p.numel());
    for (double& x : values) x = (v += 1);
    t.emplace_back(p.name, Tensor::FromDoubles(values, p.shape, DType::kF32));
  }
  return t;
}

// A file as Hugging Face writes GPT2LMHeadModel: prefixed names, Conv1D
// weights, the mask buffers, the tied head's copy.
io::SafetensorsFile HfFile(const GptSpec& s) {
  io::SafetensorsFile f;
  auto add = [&](const std::string& name, const Tensor& t) {
    f.names.push_back(name);
    f.tensors[name] = t;
  };
  const WeightsFileContents exported = ExportWeights(s, Params(s));
  for (const auto& [name, t] : exported.tensors) add("transformer." + name, t);
  add("transformer.h.0.attn.bias", Tensor::Full({1, 1, 4, 4}, DType::kF32, 1));
  add("transformer.h.0.attn.masked_bias", Tensor::Full({}, DType::kF32, -1e4));
  add("lm_head.weight", f.tensors.at("transformer.wte.weight"));
  return f;
}

std::vector<io::SafetensorsEntry> Entries(const io::SafetensorsFile& f) {
  std::vector<io::SafetensorsEntry> e;
  for (const std::string& n : f.names)
    e.push_back({n, f.tensors.at(n).dtype(), f.tensors.at(n).shape()});
  return e;
}

void ExpectInvalid(const absl::Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), text);
}

TEST(WeightsFileTest, ExportWritesConv1dWeightsAndTheConfig) {
  const GptSpec s = Tiny();
  const WeightsFileContents f = ExportWeights(s, Params(s));
  std::map<std::string, Tensor> by_name(f.tensors.begin(), f.tensors.end());
  EXPECT_EQ(by_name.at("h.0.attn.c_attn.weight").shape(), (std::vector<int64_t>{4, 12}));
  EXPECT_EQ(by_name.at("h.0.mlp.c_fc.weight").shape(), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(by_name.at("h.0.mlp.c_proj.weight").shape(), (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(by_name.at("wte.weight").shape(), (std::vector<int64_t>{10, 4}));  // not a Conv1D
  // [in, out]: element (i, o) of the file is the model's (o, i).
  const std::vector<double> model = Params(s)[4].second.ToDoubles();  // h.0.attn.c_attn.weight
  ASSERT_EQ(Params(s)[4].first, "h.0.attn.c_attn.weight");
  const std::vector<double> file = by_name.at("h.0.attn.c_attn.weight").ToDoubles();
  EXPECT_EQ(file[1 * 12 + 7], model[7 * 4 + 1]);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  const std::string& config = f.metadata.at("config");
  for (const char* field :
       {"\"model_type\": \"gpt2\"", "\"n_layer\": 1", "\"n_head\": 2", "\"n_embd\": 4",
        "\"vocab_size\": 10", "\"n_positions\": 4", "\"activation_function\": \"gelu_new\"",
        "\"tie_word_embeddings\": true"}) {
    EXPECT_TRUE(absl::StrContains(config, field)) << field << " in " << config;
  }
  // Dropout as the model applies it: one probability for all three, as nanoGPT.
  GptSpec dropped = s;
  dropped.dropout = 0.1;
  const std::string with_dropout = ExportWeights(dropped, Params(s)).metadata.at("config");
  for (const char* field :
       {"\"resid_pdrop\": 0.1,", "\"embd_pdrop\": 0.1,", "\"attn_pdrop\": 0.1,"}) {
    EXPECT_TRUE(absl::StrContains(with_dropout, field)) << field << " in " << with_dropout;
  }
}

TEST(WeightsFileTest, HuggingFaceFilesImportToTheModelsLayout) {
  const GptSpec s = Tiny();
  auto w = ImportWeights(s, HfFile(s), "gpt2.safetensors");
  ASSERT_TRUE(w.ok()) << w.status();
  for (const auto& [name, t] : Params(s)) {
    EXPECT_EQ(w->at(name).shape(), t.shape()) << name;
    EXPECT_EQ(w->at(name).ToDoubles(), t.ToDoubles()) << name;
  }
  EXPECT_EQ(w->size(), Params(s).size());
  // Without the prefix (the Hub's gpt2 files) the same.
  const WeightsFileContents plain = ExportWeights(s, Params(s));
  io::SafetensorsFile f;
  for (const auto& [name, t] : plain.tensors) f.names.push_back(name), f.tensors[name] = t;
  auto again = ImportWeights(s, f, "plain");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->at("h.0.mlp.c_proj.weight").ToDoubles(),
            w->at("h.0.mlp.c_proj.weight").ToDoubles());
}

TEST(WeightsFileTest, OlderAmpdFilesInOutInLayoutStillLoad) {
  const GptSpec s = Tiny();
  io::SafetensorsFile f;
  for (const auto& [name, t] : Params(s)) f.names.push_back(name), f.tensors[name] = t;
  auto w = ImportWeights(s, f, "old");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->at("h.0.attn.c_proj.weight").ToDoubles(), Params(s)[6].second.ToDoubles());
}

TEST(WeightsFileTest, EachMismatchNamesTheTensorAndBothShapes) {
  const GptSpec s = Tiny();
  auto check = [&](const io::SafetensorsFile& f) {
    return MatchWeightsFile(s, Entries(f), "f.safetensors").status();
  };
  io::SafetensorsFile f = HfFile(s);
  f.tensors["transformer.h.0.mlp.c_fc.weight"] = Tensor::Zeros({4, 15}, DType::kF32);
  ExpectInvalid(check(f),
                "f.safetensors: tensor transformer.h.0.mlp.c_fc.weight has shape [4, 15] in the "
                "file and [4, 16] in the model (Hugging Face GPT-2's Conv1D layout: [in, out])");
  f = HfFile(s);
  f.tensors.erase("transformer.ln_f.bias");
  f.names.erase(std::find(f.names.begin(), f.names.end(), "transformer.ln_f.bias"));
  ExpectInvalid(check(f), "f.safetensors has no tensor ln_f.bias (shape [4] in the model)");
  f = HfFile(s);
  f.tensors.erase("transformer.h.0.attn.c_proj.weight");
  f.names.erase(std::find(f.names.begin(), f.names.end(), "transformer.h.0.attn.c_proj.weight"));
  ExpectInvalid(check(f),
                "f.safetensors has no tensor h.0.attn.c_proj.weight (shape [4, 4] in "
                "the model (Hugging Face GPT-2's Conv1D layout: [in, out]))");
  f = HfFile(s);
  f.names.push_back("transformer.h.1.ln_1.weight");
  f.tensors["transformer.h.1.ln_1.weight"] = Tensor::Zeros({4}, DType::kF32);
  ExpectInvalid(check(f),
                "f.safetensors has a tensor the model does not: transformer.h.1.ln_1.weight "
                "(shape [4])");
  f = HfFile(s);
  f.names.push_back("wte.weight");
  f.tensors["wte.weight"] = f.tensors.at("transformer.wte.weight");
  ExpectInvalid(check(f),
                "f.safetensors has both transformer.wte.weight and wte.weight: one "
                "tensor under two names");
  f = HfFile(s);
  f.tensors["lm_head.weight"] = Tensor::Zeros({10, 5}, DType::kF32);
  ExpectInvalid(check(f),
                "f.safetensors: tensor lm_head.weight has shape [10, 5] in the file and "
                "[10, 4] in the model (tied to wte.weight)");
  f = HfFile(s);
  f.tensors["transformer.wpe.weight"] = Tensor::Zeros({4, 4}, DType::kU8);
  ExpectInvalid(check(f),
                "f.safetensors: tensor transformer.wpe.weight is u8, not a floating-point dtype");
  // A head copy that is not the embedding: the file is of an untied model.
  f = HfFile(s);
  f.tensors["lm_head.weight"] = Tensor::Zeros({10, 4}, DType::kF32);
  ExpectInvalid(ImportWeights(s, f, "f.safetensors").status(),
                "f.safetensors: tensor lm_head.weight differs from wte.weight, and the model ties "
                "them (model.gpt.tie_embeddings; set it false to keep both)");
  // An untied model needs the head and reads it.
  GptSpec untied = s;
  untied.tie_embeddings = false;
  f = HfFile(s);
  f.tensors["lm_head.weight"] = Tensor::Full({10, 4}, DType::kF32, 0.5);
  auto w = ImportWeights(untied, f, "f.safetensors");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->at("lm_head.weight").ToDoubles()[3], 0.5);
}

TEST(WeightsFileTest, TheMlpKeepsItsNamesAndLayout) {
  MlpSpec m;
  m.input_dim = 3;
  m.num_classes = 2;
  m.hidden = {5};
  const WeightsFileContents f = ExportWeights(m, Params(m));
  ASSERT_EQ(f.tensors.size(), Params(m).size());
  EXPECT_EQ(f.tensors[0].first, "fc1.weight");
  EXPECT_EQ(f.tensors[0].second.shape(), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(f.metadata.count("config"), 0u);
}

}  // namespace
}  // namespace ampd::engine::nn
