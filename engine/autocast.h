#ifndef AMPD_ENGINE_AUTOCAST_H_
#define AMPD_ENGINE_AUTOCAST_H_

// Autocast: which dtype each op computes in, modelled on torch.autocast's cast
// policies, made explicit and inspectable.
//
//   kLowerPrecision  matmul, linear, bmm (conv when added): f32 inputs are cast
//                    to the region's dtype (bf16 default, f16 selectable).
//   kFp32            softmax, log_softmax, layer_norm, exp, log, pow, losses,
//                    sum, mean: f16/bf16 inputs are cast to f32.
//   kPromote         add, sub, mul (cat when added): inputs cast to the widest.
//   kPassThrough     relu, gelu, dropout, embedding, cast: run in the input dtype.
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

#include "engine/dtype.h"
#include "engine/tensor.h"

namespace ampd::engine {

enum class CastPolicy { kLowerPrecision, kFp32, kPromote, kPassThrough };
std::string_view CastPolicyName(CastPolicy policy);

// The built-in policy of an op ("linear", "softmax", ...). Unknown: pass-through.
CastPolicy DefaultCastPolicy(std::string_view op);

struct AutocastOverrides {
  std::map<std::string, CastPolicy> op_policies;  // "gelu" -> kFp32, ...
  std::set<std::string> fp32_layers;              // layers kept entirely in f32 ("head")
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

// One row of an explain plan.
struct PlanEntry {
  std::string op;
  std::string layer;
  std::vector<DType> input_dtypes;  // as the op received them, before autocast
  CastPolicy policy;
  DType compute_dtype;
  DType output_dtype;
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
  OpDispatch(std::string_view op, std::vector<Tensor*> inputs);
  DType compute_dtype() const { return compute_; }
  CastPolicy policy() const { return policy_; }
  void Finish(const Tensor& output);

 private:
  std::string op_;
  std::vector<DType> input_dtypes_;
  CastPolicy policy_;
  DType compute_;
};

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_AUTOCAST_H_
