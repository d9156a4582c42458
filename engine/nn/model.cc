#include "engine/nn/model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "engine/core/rng.h"

namespace ampd::engine::nn {

using amp::PrecisionConfig;
using amp::ValidatePrecision;
using core::FieldError;

int64_t ParameterShape::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ModelShape::parameter_count() const {
  int64_t n = 0;
  for (const ParameterShape& p : parameters) n += p.numel();
  return n;
}

namespace {

// std::visit over the architectures with one lambda each.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  return std::visit(Overloaded{[](const MlpSpec& m) { return ValidateMlp(m); },
                               [](const GptSpec& g) { return ValidateGpt(g); },
                               [](const SequentialSpec& q) { return ValidateSequential(q); }},
                    spec);
}

ModelShape DescribeModel(const ModelSpec& spec) {
  return std::visit(Overloaded{[](const MlpSpec& m) { return DescribeMlp(m); },
                               [](const GptSpec& g) { return DescribeGpt(g); },
                               [](const SequentialSpec& q) { return DescribeSequential(q); }},
                    spec);
}

bool IsLanguageModel(const ModelSpec& spec) { return std::holds_alternative<GptSpec>(spec); }

int64_t ParameterCount(const ModelSpec& spec) { return DescribeModel(spec).parameter_count(); }

std::vector<Parameter> InitParameters(const std::vector<ParameterShape>& shapes,
                                      const PrecisionConfig& precision, uint64_t seed) {
  core::Rng rng(seed);
  std::vector<Parameter> params;
  for (const ParameterShape& p : shapes) {
    std::vector<float> v(p.numel());
    if (p.init != ParameterShape::Init::kUniformFanIn) {
      std::fill(v.begin(), v.end(), p.init == ParameterShape::Init::kOnes ? 1.0f : 0.0f);
    } else {
      const float bound = 1.0f / std::sqrt(static_cast<float>(p.fan_in));
      for (float& x : v) x = rng.Uniform(-bound, bound);
    }
    const DType dt = p.is_norm && precision.keep_norms_fp32 ? DType::kF32 : precision.param_dtype;
    Tensor value = Tensor::FromVector(v, p.shape, dt);
    value.set_requires_grad(true).set_name(p.name);
    params.push_back({p.name, p.layer, p.is_norm, std::move(value)});
  }
  return params;
}

std::vector<OpId> ModelOps(const ModelSpec& spec) { return DescribeModel(spec).ops; }

bool DataDimsKnown(const ModelSpec& spec) {
  return std::visit(
      Overloaded{
          [](const MlpSpec& m) { return m.input_dim > 0 && m.num_classes > 0; },
          [](const GptSpec&) { return true; },
          [](const SequentialSpec& q) { return !q.input_shape.empty() && q.num_classes > 0; }},
      spec);
}

void FillDataDims(ModelSpec* spec, int64_t feature_dim, int64_t num_classes,
                  const std::vector<int64_t>& example_shape) {
  if (SequentialSpec* q = std::get_if<SequentialSpec>(spec)) {
    if (q->input_shape.empty()) {
      q->input_shape = example_shape.empty() ? std::vector<int64_t>{feature_dim} : example_shape;
    }
    if (q->num_classes == 0) q->num_classes = std::max<int64_t>(2, num_classes);
    return;
  }
  MlpSpec* m = std::get_if<MlpSpec>(spec);
  if (m == nullptr) return;  // a GPT's sizes are all in its spec
  if (m->input_dim == 0) m->input_dim = feature_dim;
  if (m->num_classes == 0) m->num_classes = std::max<int64_t>(2, num_classes);
}

absl::Status CheckDataDims(const ModelSpec& spec, int64_t feature_dim, int64_t num_classes) {
  return std::visit(
      Overloaded{[](const GptSpec&) { return absl::OkStatus(); },
                 [&](const SequentialSpec& q) -> absl::Status {
                   if (feature_dim != SequentialInputDim(q)) {
                     return FieldError(
                         "model.sequential.input_shape",
                         absl::StrCat("holds ", SequentialInputDim(q), " values but the data has ",
                                      feature_dim, " features per example"));
                   }
                   if (num_classes > q.num_classes) {
                     return FieldError("model.sequential.num_classes",
                                       absl::StrCat("is ", q.num_classes, " but the data has ",
                                                    num_classes, " classes"));
                   }
                   return absl::OkStatus();
                 },
                 [&](const MlpSpec& m) -> absl::Status {
                   if (feature_dim != m.input_dim) {
                     return FieldError("model.mlp.input_dim",
                                       absl::StrCat("is ", m.input_dim, " but the data has ",
                                                    feature_dim, " features per example"));
                   }
                   if (num_classes > m.num_classes) {
                     return FieldError("model.mlp.num_classes",
                                       absl::StrCat("is ", m.num_classes, " but the data has ",
                                                    num_classes, " classes"));
                   }
                   return absl::OkStatus();
                 }},
      spec);
}

absl::StatusOr<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec,
                                                  const PrecisionConfig& precision, uint64_t seed) {
  if (absl::Status s = ValidateModelSpec(spec); !s.ok()) return s;
  if (absl::Status s = ValidatePrecision(precision); !s.ok()) return s;
  return std::visit(
      Overloaded{[&](const MlpSpec& m) -> absl::StatusOr<std::unique_ptr<Model>> {
                   return BuildMlp(m, precision, seed);
                 },
                 [&](const SequentialSpec& q) -> absl::StatusOr<std::unique_ptr<Model>> {
                   return BuildSequential(q, precision, seed);
                 },
                 [&](const GptSpec& g) -> absl::StatusOr<std::unique_ptr<Model>> {
                   absl::StatusOr<std::unique_ptr<Gpt>> gpt =
                       Gpt::Build(g, seed, precision.param_dtype, precision.keep_norms_fp32,
                                  precision.fp8 ? &precision.fp8_recipe : nullptr,
                                  precision.overrides.fp32_layers);
                   if (!gpt.ok()) return gpt.status();
                   return std::unique_ptr<Model>(*std::move(gpt));
                 }},
      spec);
}

}  // namespace ampd::engine::nn
