#ifndef AMPD_ENGINE_AMP_PRECISION_H_
#define AMPD_ENGINE_AMP_PRECISION_H_

// One PrecisionConfig describes every mode. Lightning strings and Apex opt
// levels are aliases resolving to the same configs:
//
//   mode        autocast  params  master f32  loss scaling      aliases
//   32-true     off       f32     -           off               O0, 32, fp32
//   16-mixed    f16       f32     -           dynamic 2^16      O1, 16, 16-mixed
//   bf16-mixed  bf16      f32     -           off               bf16
//   16-true     off       f16     no          off
//   bf16-true   off       bf16    no          off
//   O2          off       f16     yes         dynamic 2^16      (norms kept f32)
//   O3          off       f16     no          static 1.0
//
// and the FP8 modes (Transformer Engine's recipe, backend/fp8_scaling.h):
// a transformer's block linears run as FP8 GEMMs (ops/fp8_linear.h), the
// rest as under the autocast dtype, master weights and optimizer in f32:
//
//   mode                        autocast  fp8 scaling           loss scaling
//   fp8-hybrid                  bf16      delayed, HYBRID       off    (alias transformer-engine)
//   fp8-current                 bf16      current, HYBRID       off
//   transformer-engine-float16  f16       delayed, HYBRID       dynamic 2^16

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/grad_scaler.h"
#include "engine/backend/fp8_scaling.h"
#include "engine/core/dtype.h"
#include "engine/ops/autocast.h"

namespace ampd::engine::amp {

struct PrecisionConfig {
  static GradScalerOptions Disabled() {
    GradScalerOptions o;
    o.enabled = false;
    return o;
  }

  std::string name;  // canonical mode name, or a user profile's name
  bool autocast = false;
  DType autocast_dtype = DType::kBF16;
  DType param_dtype = DType::kF32;  // the dtype the model computes with
  bool master_weights = false;      // f32 master copy when param_dtype is low
  bool keep_norms_fp32 = false;     // norm parameters stay f32 (Apex O2)
  GradScalerOptions loss_scaling = Disabled();
  ops::AutocastOverrides overrides;  // per-op policies, layers kept in f32
  bool allow_tf32 = false;           // CUDA f32 GEMMs; off by default
  // FP8 GEMMs for a transformer's block linears, with this recipe.
  bool fp8 = false;
  backend::Fp8Recipe fp8_recipe;
};

// "bf16-mixed", "O2", "16", ... -> the config. Unknown names list the valid ones.
// The autocast region a precision runs its forward in (its dtype, on or off,
// and its per-op and per-layer overrides): the trainer's and generation's.
ops::AutocastOptions AutocastRegion(const PrecisionConfig& p);

absl::StatusOr<PrecisionConfig> ResolvePrecision(std::string_view name);
// Canonical names of the built-in modes, in table order, then the Apex levels.
std::vector<std::string> BuiltinPrecisionNames();
// For error messages: the canonical names, then the aliases ResolvePrecision
// also takes ("... (or the aliases 32, fp32, 16, bf16, transformer-engine)").
std::string KnownPrecisionNames();
// Why a name other frameworks use is refused ("64-true": double precision),
// or nothing for any other name.
std::optional<std::string> UnsupportedPrecisionReason(std::string_view name);
// Rejects invalid combinations with the offending field named.
absl::Status ValidatePrecision(const PrecisionConfig& config);
// The dtype of optimizer-visible (updated) weights: f32 with master weights.
inline DType UpdateDType(const PrecisionConfig& c) {
  return c.master_weights ? DType::kF32 : c.param_dtype;
}

}  // namespace ampd::engine::amp

#endif  // AMPD_ENGINE_AMP_PRECISION_H_
