#ifndef AMPD_ENGINE_OPS_AUTOCAST_H_
#define AMPD_ENGINE_OPS_AUTOCAST_H_

// Autocast: which dtype each op computes in, modelled on torch.autocast's cast
// policies, made explicit and inspectable. Each op's policy is in its
// descriptor (op_list.h): lower precision for matmul and linear; f32 for
// softmax, log_softmax, layer_norm, exp, log, pow, losses, sum and mean;
// promote for add, sub and mul; pass-through for the rest.
//
// As in PyTorch: f64 inputs are never autocast, in-place ops are never
// autocast, and f32 leaf tensors that require grad (parameters) are cast once
// per region: the copy is cached until the outermost region exits, so the
// cache never grows across steps.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/fp8.h"
#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::ops {

std::string_view CastPolicyName(CastPolicy policy);

// The built-in policy of an op: its descriptor's.
constexpr CastPolicy DefaultCastPolicy(OpId op) { return Describe(op).policy; }
// The op named `name` ("linear", "pow", ...), as precision overrides spell it.
std::optional<OpId> FindOp(std::string_view name);

struct AutocastOverrides {
  std::map<OpId, CastPolicy> op_policies;  // kGelu -> kFp32, ...
  std::set<std::string> fp32_layers;       // layers kept entirely in f32 ("head")
};

struct AutocastOptions {
  bool enabled = true;
  DType dtype = DType::kBF16;
  // Unset: inherit the enclosing region's overrides.
  std::optional<AutocastOverrides> overrides;
};

// A region, like `with torch.autocast(...)`. Regions nest; the innermost wins.
class AutocastScope {
 public:
  explicit AutocastScope(AutocastOptions options);
  AutocastScope(bool enabled, DType dtype = DType::kBF16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
};

bool AutocastEnabled();
DType AutocastDType();
// The dtype `op` computes in here (this region, these layers) when the widest
// of its floating inputs is `widest`: what its OpDispatch will choose.
DType AutocastComputeDType(OpId op, DType widest);
int AutocastDepth();
size_t AutocastCacheSize();

// Names the layer that ops in scope belong to (for overrides and explain).
class LayerScope {
 public:
  explicit LayerScope(std::string name);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;
};
std::string CurrentLayer();

// The FP8 formats of an FP8 GEMM's operands (explain plans mark them).
struct Fp8Operands {
  core::Fp8Format input = core::Fp8Format::kE4M3;
  core::Fp8Format weight = core::Fp8Format::kE4M3;
  core::Fp8Format grad_output = core::Fp8Format::kE5M2;
  bool current_scaling = false;  // else delayed
};

// One row of an explain plan.
struct PlanEntry {
  std::string op;  // its name (OpName)
  std::string layer;
  std::vector<DType> input_dtypes;  // as the op received them, before autocast
  CastPolicy policy;
  DType compute_dtype;
  DType output_dtype;
  std::vector<int64_t> output_shape;  // as recorded
  // The output's bytes at the batch the plan is for (ExplainPrecision scales
  // the recorded shape's rows): what the op adds to activation memory.
  int64_t output_bytes = 0;
  // Set for an FP8 GEMM (fp8_linear): its operands' formats.
  std::optional<Fp8Operands> fp8;
};

// Records the plan of every op dispatched on this thread while alive.
class PlanRecorder {
 public:
  PlanRecorder();
  ~PlanRecorder();
  PlanRecorder(const PlanRecorder&) = delete;
  PlanRecorder& operator=(const PlanRecorder&) = delete;
  const std::vector<PlanEntry>& entries() const { return entries_; }

 private:
  friend class OpDispatch;
  PlanRecorder* previous_;
  std::vector<PlanEntry> entries_;
};

// Used by every op: applies the policy to its floating inputs (casting through
// the differentiable Cast op), and records the plan row when Finish is called.
class OpDispatch {
 public:
  OpDispatch(OpId op, std::vector<Tensor*> inputs);
  // `read_as_is`: inputs that count toward the dtypes (recorded, and in the
  // widest) but are never cast, because the op's kernels read them in any
  // floating dtype and widen them to compute_dtype() themselves (batch
  // norm's activations: no whole-tensor f32 copy).
  OpDispatch(OpId op, std::vector<Tensor*> inputs, std::vector<const Tensor*> read_as_is);
  // `WidenInKernel`: an input is cast only when the cast would change its
  // values; one that widens exactly to compute_dtype() (bf16/f16 to f32, f32
  // to f64) is left as it is, because the op's kernels widen as they load
  // (the binary family: a residual add reads the bf16 branch itself, with no
  // f32 copy of it). Results are bitwise those of casting first.
  struct WidenInKernel {};
  OpDispatch(OpId op, std::vector<Tensor*> inputs, WidenInKernel);
  DType compute_dtype() const { return compute_; }
  CastPolicy policy() const { return policy_; }
  void Finish(const Tensor& output);
  // An FP8 GEMM says what its operands are cast to (before Finish).
  void set_fp8(const Fp8Operands& fp8) { fp8_ = fp8; }

 private:
  OpDispatch(OpId op, std::vector<Tensor*> inputs, std::vector<const Tensor*> read_as_is,
             bool widen_in_kernel);

  OpId op_;
  std::vector<DType> input_dtypes_;
  CastPolicy policy_;
  DType compute_;
  std::optional<Fp8Operands> fp8_;
};

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_AUTOCAST_H_
