#include "engine/nn/mlp.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "engine/nn/model.h"
#include "engine/nn/module.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"

namespace ampd::engine::nn {

using amp::PrecisionConfig;
using core::FieldError;
using ops::Cast;
using ops::Dropout;
using ops::Gelu;
using ops::LayerNorm;
using ops::LayerScope;
using ops::Linear;
using ops::Relu;

namespace {

class Mlp final : public Classifier {
 public:
  Mlp(const MlpSpec& spec, const PrecisionConfig& precision, uint64_t seed)
      : spec_(spec), shape_(DescribeMlp(spec)) {
    // PyTorch's defaults: nn.Linear's uniform for weight then bias, drawn in
    // parameter order; LayerNorm's ones and zeros.
    params_ = InitParameters(shape_.parameters, precision, seed);
  }

  Tensor Forward(const Tensor& x_in, bool training, uint64_t dropout_seed) override {
    // Apex O2/O3 and the *-true modes cast the batch to the parameter dtype.
    Tensor x = Cast(x_in, params_[0].value.dtype());
    size_t p = 0;
    for (size_t i = 0; i < spec_.hidden.size(); ++i) {
      const Parameter& w = params_[p++];
      const Parameter& b = params_[p++];
      {
        LayerScope layer(w.layer);
        x = Linear(x, w.value, b.value);
      }
      if (spec_.layer_norm) {
        const Parameter& g = params_[p++];
        const Parameter& beta = params_[p++];
        LayerScope layer(g.layer);
        x = LayerNorm(x, g.value, beta.value);
      }
      LayerScope layer(absl::StrCat("act", i + 1));
      x = spec_.activation == Activation::kRelu ? Relu(x) : Gelu(x);
      if (spec_.dropout > 0) x = Dropout(x, spec_.dropout, dropout_seed * 1000003 + i, training);
    }
    LayerScope layer("head");
    return Linear(x, params_[p].value, params_[p + 1].value);
  }

  std::vector<Parameter>& parameters() override { return params_; }
  int64_t input_dim() const override { return spec_.input_dim; }
  int64_t num_classes() const override { return spec_.num_classes; }
  int64_t activation_elements_per_example() const override {
    return shape_.activation_elements_per_example;
  }

 private:
  MlpSpec spec_;
  ModelShape shape_;
  std::vector<Parameter> params_;
};

}  // namespace

absl::Status ValidateMlp(const MlpSpec& m) {
  auto bad = [](const std::string& field, const std::string& why) {
    return FieldError(absl::StrCat("model.mlp.", field), why);
  };
  constexpr int64_t kMaxWidth = kMaxMlpWidth;
  if (m.input_dim <= 0) return bad("input_dim", absl::StrCat("must be > 0, got ", m.input_dim));
  if (m.input_dim > kMaxWidth) {
    return bad("input_dim", absl::StrCat("must be <= ", kMaxWidth, ", got ", m.input_dim));
  }
  if (m.num_classes < 2) {
    return bad("num_classes", absl::StrCat("must be >= 2, got ", m.num_classes));
  }
  if (m.num_classes > kMaxWidth) {
    return bad("num_classes", absl::StrCat("must be <= ", kMaxWidth, ", got ", m.num_classes));
  }
  for (size_t i = 0; i < m.hidden.size(); ++i) {
    if (m.hidden[i] <= 0 || m.hidden[i] > kMaxWidth) {
      return bad(absl::StrCat("hidden[", i, "]"),
                 absl::StrCat("must be in [1, ", kMaxWidth, "], got ", m.hidden[i]));
    }
  }
  if (!(m.dropout >= 0.0 && m.dropout < 1.0)) {
    return bad("dropout", absl::StrCat("must be in [0, 1), got ", m.dropout));
  }
  return absl::OkStatus();
}

ModelShape DescribeMlp(const MlpSpec& m) {
  using Init = ParameterShape::Init;
  ModelShape s;
  auto linear = [&](const std::string& layer, int64_t in, int64_t out) {
    s.parameters.push_back({layer + ".weight", layer, {out, in}, false, Init::kUniformFanIn, in});
    s.parameters.push_back({layer + ".bias", layer, {out}, false, Init::kUniformFanIn, in});
  };
  auto norm = [&](const std::string& layer, int64_t dim) {
    s.parameters.push_back({layer + ".weight", layer, {dim}, true, Init::kOnes, 0});
    s.parameters.push_back({layer + ".bias", layer, {dim}, true, Init::kZeros, 0});
  };
  int64_t in = m.input_dim;
  s.activation_elements_per_example = m.input_dim;
  for (size_t i = 0; i < m.hidden.size(); ++i) {
    const std::string n = absl::StrCat(i + 1);
    linear("fc" + n, in, m.hidden[i]);
    if (m.layer_norm) norm("norm" + n, m.hidden[i]);
    // The linear's output and the activation's (and the norm's).
    s.activation_elements_per_example += m.hidden[i] * (m.layer_norm ? 3 : 2);
    in = m.hidden[i];
  }
  linear("head", in, m.num_classes);
  s.activation_elements_per_example += m.num_classes;
  s.ops = {OpId::kLinear, OpId::kCast};
  if (!m.hidden.empty())
    s.ops.push_back(m.activation == Activation::kRelu ? OpId::kRelu : OpId::kGelu);
  if (m.layer_norm) s.ops.push_back(OpId::kLayerNorm);
  if (m.dropout > 0) s.ops.push_back(OpId::kDropout);
  s.flops_per_example = 6.0 * static_cast<double>(s.parameter_count());
  return s;
}

std::unique_ptr<Model> BuildMlp(const MlpSpec& spec, const PrecisionConfig& precision,
                                uint64_t seed) {
  return std::make_unique<Mlp>(spec, precision, seed);
}

}  // namespace ampd::engine::nn
