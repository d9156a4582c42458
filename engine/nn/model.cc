#include "engine/nn/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"

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

absl::Status ValidateModelSpec(const ModelSpec& spec) {
  return std::visit([](const MlpSpec& m) { return ValidateMlp(m); }, spec);
}

ModelShape DescribeModel(const ModelSpec& spec) {
  return std::visit([](const MlpSpec& m) { return DescribeMlp(m); }, spec);
}

int64_t ParameterCount(const ModelSpec& spec) { return DescribeModel(spec).parameter_count(); }

std::vector<OpId> ModelOps(const ModelSpec& spec) { return DescribeModel(spec).ops; }

bool DataDimsKnown(const ModelSpec& spec) {
  return std::visit([](const MlpSpec& m) { return m.input_dim > 0 && m.num_classes > 0; }, spec);
}

void FillDataDims(ModelSpec* spec, int64_t feature_dim, int64_t num_classes) {
  std::visit(
      [&](MlpSpec& m) {
        if (m.input_dim == 0) m.input_dim = feature_dim;
        if (m.num_classes == 0) m.num_classes = std::max<int64_t>(2, num_classes);
      },
      *spec);
}

absl::Status CheckDataDims(const ModelSpec& spec, int64_t feature_dim, int64_t num_classes) {
  return std::visit(
      [&](const MlpSpec& m) -> absl::Status {
        if (feature_dim != m.input_dim) {
          return FieldError("model.mlp.input_dim",
                            absl::StrCat("is ", m.input_dim, " but the data has ", feature_dim,
                                         " features per example"));
        }
        if (num_classes > m.num_classes) {
          return FieldError(
              "model.mlp.num_classes",
              absl::StrCat("is ", m.num_classes, " but the data has ", num_classes, " classes"));
        }
        return absl::OkStatus();
      },
      spec);
}

absl::StatusOr<std::unique_ptr<Model>> BuildModel(const ModelSpec& spec,
                                                  const PrecisionConfig& precision, uint64_t seed) {
  if (absl::Status s = ValidateModelSpec(spec); !s.ok()) return s;
  if (absl::Status s = ValidatePrecision(precision); !s.ok()) return s;
  return std::visit([&](const MlpSpec& m) { return BuildMlp(m, precision, seed); }, spec);
}

}  // namespace ampd::engine::nn
