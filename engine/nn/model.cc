#include "engine/nn/model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/core/rng.h"

namespace ampd::engine {
namespace {

class Mlp final : public Model {
 public:
  Mlp(const MlpSpec& spec, const PrecisionConfig& precision, uint64_t seed) : spec_(spec) {
    Rng rng(seed);
    int64_t in = spec.input_dim;
    for (size_t i = 0; i < spec.hidden.size(); ++i) {
      const std::string n = absl::StrCat(i + 1);
      AddLinear("fc" + n, in, spec.hidden[i], precision, rng);
      if (spec.layer_norm) AddNorm("norm" + n, spec.hidden[i], precision);
      in = spec.hidden[i];
    }
    AddLinear("head", in, spec.num_classes, precision, rng);
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
    int64_t n = spec_.input_dim;
    for (int64_t h : spec_.hidden) n += h * (spec_.layer_norm ? 3 : 2);
    return n + spec_.num_classes;
  }

 private:
  void AddLinear(const std::string& layer, int64_t in, int64_t out,
                 const PrecisionConfig& precision, Rng& rng) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    std::vector<float> w(in * out), b(out);
    for (float& v : w) v = rng.Uniform(-bound, bound);
    for (float& v : b) v = rng.Uniform(-bound, bound);
    Add(layer + ".weight", layer, false, Tensor::FromVector(w, {out, in}, precision.param_dtype));
    Add(layer + ".bias", layer, false, Tensor::FromVector(b, {out}, precision.param_dtype));
  }
  void AddNorm(const std::string& layer, int64_t dim, const PrecisionConfig& precision) {
    const DType dt = precision.keep_norms_fp32 ? DType::kF32 : precision.param_dtype;
    Add(layer + ".weight", layer, true, Tensor::Full({dim}, dt, 1.0));
    Add(layer + ".bias", layer, true, Tensor::Full({dim}, dt, 0.0));
  }
  void Add(std::string name, std::string layer, bool is_norm, Tensor value) {
    value.set_requires_grad(true).set_name(name);
    params_.push_back({std::move(name), std::move(layer), is_norm, std::move(value)});
  }

  MlpSpec spec_;
  std::vector<Parameter> params_;
};

}  // namespace

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  const MlpSpec& m = std::get<MlpSpec>(spec);
  auto bad = [](const std::string& field, const std::string& why) {
    return FieldError(absl::StrCat("model.mlp.", field), why);
  };
  if (m.input_dim <= 0) return bad("input_dim", absl::StrCat("must be > 0, got ", m.input_dim));
  if (m.num_classes < 2) {
    return bad("num_classes", absl::StrCat("must be >= 2, got ", m.num_classes));
  }
  for (size_t i = 0; i < m.hidden.size(); ++i) {
    if (m.hidden[i] <= 0) {
      return bad(absl::StrCat("hidden[", i, "]"), absl::StrCat("must be > 0, got ", m.hidden[i]));
    }
  }
  if (!(m.dropout >= 0.0 && m.dropout < 1.0)) {
    return bad("dropout", absl::StrCat("must be in [0, 1), got ", m.dropout));
  }
  return absl::OkStatus();
}

int64_t ParameterCount(const ModelSpec& spec) {
  const MlpSpec& m = std::get<MlpSpec>(spec);
  int64_t n = 0, in = m.input_dim;
  for (int64_t h : m.hidden) {
    n += in * h + h + (m.layer_norm ? 2 * h : 0);
    in = h;
  }
  return n + in * m.num_classes + m.num_classes;
}

std::vector<OpId> ModelOps(const ModelSpec& spec) {
  const MlpSpec& m = std::get<MlpSpec>(spec);
  std::vector<OpId> ops = {OpId::kLinear, OpId::kCast};
  if (!m.hidden.empty()) ops.push_back(m.activation == Activation::kRelu ? OpId::kRelu : OpId::kGelu);
  if (m.layer_norm) ops.push_back(OpId::kLayerNorm);
  if (m.dropout > 0) ops.push_back(OpId::kDropout);
  return ops;
}

absl::StatusOr<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec,
                                                  const PrecisionConfig& precision, uint64_t seed) {
  if (absl::Status s = ValidateModelSpec(spec); !s.ok()) return s;
  if (absl::Status s = ValidatePrecision(precision); !s.ok()) return s;
  return std::unique_ptr<Model>(new Mlp(std::get<MlpSpec>(spec), precision, seed));
}

}  // namespace ampd::engine
