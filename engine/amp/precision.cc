#include "engine/amp/precision.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/error_subject.h"

namespace ampd::engine::amp {

using core::FieldError;
using core::IsLowPrecision;
using core::PrefixSubject;

namespace {

PrecisionConfig Mode(const char* name, bool autocast, DType autocast_dtype, DType params,
                     bool master, bool norms_f32, bool scaling, bool dynamic, double init) {
  PrecisionConfig c;
  c.name = name;
  c.autocast = autocast;
  c.autocast_dtype = autocast_dtype;
  c.param_dtype = params;
  c.master_weights = master;
  c.keep_norms_fp32 = norms_f32;
  c.loss_scaling.enabled = scaling;
  c.loss_scaling.dynamic = dynamic;
  c.loss_scaling.init_scale = init;
  return c;
}

// Autocast in `dtype` around FP8 block linears; f16 brings dynamic loss
// scaling (as 16-mixed). Current scaling has no history: each cast's own
// amax sets its scale (the most recent of a history of one).
PrecisionConfig Fp8Mode(const char* name, DType dtype, backend::Fp8ScalingKind kind) {
  PrecisionConfig c =
      Mode(name, true, dtype, DType::kF32, false, false, dtype == DType::kF16, true, 65536.0);
  c.fp8 = true;
  c.fp8_recipe.kind = kind;
  if (kind == backend::Fp8ScalingKind::kCurrent) {
    c.fp8_recipe.amax_history_len = 1;
    c.fp8_recipe.amax_compute_algo = backend::AmaxAlgo::kMostRecent;
  }
  return c;
}

const std::vector<PrecisionConfig>& Builtins() {
  using D = DType;
  static const auto* modes = new std::vector<PrecisionConfig>{
      Mode("32-true", false, D::kBF16, D::kF32, false, false, false, true, 65536.0),
      Mode("16-mixed", true, D::kF16, D::kF32, false, false, true, true, 65536.0),
      Mode("bf16-mixed", true, D::kBF16, D::kF32, false, false, false, true, 65536.0),
      Mode("16-true", false, D::kF16, D::kF16, false, false, false, true, 65536.0),
      Mode("bf16-true", false, D::kBF16, D::kBF16, false, false, false, true, 65536.0),
      // O0 is an alias of 32-true: identical in every field, autocast_dtype included.
      Mode("O0", false, D::kBF16, D::kF32, false, false, false, true, 65536.0),
      Mode("O1", true, D::kF16, D::kF32, false, false, true, true, 65536.0),
      Mode("O2", false, D::kF16, D::kF16, true, true, true, true, 65536.0),
      Mode("O3", false, D::kF16, D::kF16, false, false, true, false, 1.0),
      Fp8Mode("fp8-hybrid", D::kBF16, backend::Fp8ScalingKind::kDelayed),
      Fp8Mode("fp8-current", D::kBF16, backend::Fp8ScalingKind::kCurrent),
      Fp8Mode("transformer-engine-float16", D::kF16, backend::Fp8ScalingKind::kDelayed),
  };
  return *modes;
}

}  // namespace

std::vector<std::string> BuiltinPrecisionNames() {
  std::vector<std::string> names;
  for (const auto& m : Builtins()) names.push_back(m.name);
  return names;
}

std::string KnownPrecisionNames() {
  return absl::StrCat(absl::StrJoin(BuiltinPrecisionNames(), ", "),
                      " (or the aliases 32, fp32, 16, bf16, transformer-engine)");
}

std::optional<std::string> UnsupportedPrecisionReason(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "64" || lower == "64-true") {  // Lightning's double precision
    return absl::StrCat("\"", std::string(name),
                        "\" (double precision) is not supported: ampd trains in f32 at most; "
                        "use 32-true");
  }
  return std::nullopt;
}

absl::StatusOr<PrecisionConfig> ResolvePrecision(std::string_view name_in) {
  const std::string name = absl::AsciiStrToLower(std::string(name_in));
  static const auto* aliases = new std::map<std::string, std::string>{
      {"32", "32-true"},
      {"fp32", "32-true"},
      {"32-true", "32-true"},
      {"16", "16-mixed"},
      {"16-mixed", "16-mixed"},
      {"bf16", "bf16-mixed"},
      {"bf16-mixed", "bf16-mixed"},
      {"16-true", "16-true"},
      {"bf16-true", "bf16-true"},
      {"o0", "O0"},
      {"o1", "O1"},
      {"o2", "O2"},
      {"o3", "O3"},
      {"fp8-hybrid", "fp8-hybrid"},
      {"fp8-current", "fp8-current"},
      // Lightning's names of Transformer Engine's precision.
      {"transformer-engine", "fp8-hybrid"},
      {"transformer-engine-float16", "transformer-engine-float16"},
  };
  auto it = aliases->find(name);
  if (std::optional<std::string> why = UnsupportedPrecisionReason(name_in)) {
    return FieldError("precision", *why);
  }
  if (it == aliases->end()) {
    return FieldError("precision", absl::StrCat("unknown mode \"", std::string(name_in),
                                                "\"; expected one of ", KnownPrecisionNames()));
  }
  for (const auto& m : Builtins()) {
    if (m.name == it->second) return m;
  }
  return absl::InternalError("precision table is inconsistent");
}

absl::Status ValidatePrecision(const PrecisionConfig& c) {
  if (c.autocast && !IsLowPrecision(c.autocast_dtype)) {
    return FieldError("precision.autocast_dtype",
                      absl::StrCat("must be f16 or bf16 when autocast is on, got ",
                                   std::string(DTypeName(c.autocast_dtype))));
  }
  if (c.param_dtype == DType::kF64) {
    return FieldError("precision.param_dtype", "f64 training is not supported");
  }
  if (c.master_weights && !IsLowPrecision(c.param_dtype)) {
    return FieldError("precision.master_weights",
                      "only meaningful when param_dtype is f16 or bf16");
  }
  if (c.keep_norms_fp32 && !IsLowPrecision(c.param_dtype)) {
    return FieldError("precision.keep_norms_fp32",
                      "only meaningful when param_dtype is f16 or bf16");
  }
  if (c.autocast && IsLowPrecision(c.param_dtype)) {
    return FieldError("precision.autocast",
                      "autocast expects f32 parameters; with f16/bf16 parameters use a "
                      "*-true mode or O2");
  }
  if (c.loss_scaling.enabled) {
    absl::Status s = ValidateGradScalerOptions(c.loss_scaling);
    if (!s.ok()) return PrefixSubject(s, "precision.");
  }
  if (c.fp8) {
    // The ops around the FP8 GEMMs (norms, attention, the head) run under
    // autocast on f32 parameters, as Transformer Engine's recipe has them.
    if (!c.autocast) {
      return FieldError("precision.fp8",
                        "FP8 needs autocast on (bf16 or f16 around the FP8 GEMMs): use the "
                        "fp8-hybrid, fp8-current or transformer-engine-float16 base");
    }
    if (c.param_dtype != DType::kF32) {
      return FieldError("precision.fp8", "FP8 keeps f32 parameters (master weights in f32)");
    }
    if (absl::Status s = backend::ValidateFp8Recipe(c.fp8_recipe, "precision.fp8"); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

ops::AutocastOptions AutocastRegion(const PrecisionConfig& p) {
  ops::AutocastOptions o;
  o.enabled = p.autocast;
  o.dtype = p.autocast_dtype;
  o.overrides = p.overrides;
  return o;
}

}  // namespace ampd::engine::amp
