#include "engine/ops/autocast.h"

#include <unordered_map>

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"

namespace ampd::engine::ops {

using autograd::GradEnabled;
using core::PromoteTypes;

namespace {

struct Region {
  bool enabled;
  DType dtype;
  AutocastOverrides overrides;
};

struct ThreadState {
  std::vector<Region> regions;
  std::vector<std::string> layers;
  // Parameter (leaf f32, requires grad) -> its low-precision copy this region.
  std::unordered_map<TensorImpl*, std::pair<Tensor, Tensor>> cache;  // impl -> (source, copy)
  PlanRecorder* recorder = nullptr;
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

bool IsFloating(const Tensor& t) { return t.defined(); }

}  // namespace

std::string_view CastPolicyName(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::kLowerPrecision:
      return "lower_precision";
    case CastPolicy::kFp32:
      return "fp32";
    case CastPolicy::kPromote:
      return "promote";
    case CastPolicy::kPassThrough:
      return "pass_through";
  }
  return "?";
}

std::optional<OpId> FindOp(std::string_view name) {
  for (const OpDescriptor& d : kOpDescriptors) {
    if (name == d.name) return d.id;
  }
  return std::nullopt;
}

AutocastScope::AutocastScope(bool enabled, DType dtype)
    : AutocastScope(AutocastOptions{enabled, dtype, std::nullopt}) {}

AutocastScope::AutocastScope(AutocastOptions options) {
  ThreadState& s = State();
  Region r{options.enabled, options.dtype, {}};
  if (options.overrides) {
    r.overrides = *options.overrides;
  } else if (!s.regions.empty()) {
    r.overrides = s.regions.back().overrides;
  }
  s.regions.push_back(std::move(r));
}

AutocastScope::~AutocastScope() {
  ThreadState& s = State();
  s.regions.pop_back();
  // torch.autocast clears its cast cache when the outermost region exits.
  if (s.regions.empty()) s.cache.clear();
}

bool AutocastEnabled() {
  const ThreadState& s = State();
  return !s.regions.empty() && s.regions.back().enabled;
}

DType AutocastDType() {
  const ThreadState& s = State();
  return s.regions.empty() ? DType::kBF16 : s.regions.back().dtype;
}

int AutocastDepth() { return static_cast<int>(State().regions.size()); }
size_t AutocastCacheSize() { return State().cache.size(); }

LayerScope::LayerScope(std::string name) { State().layers.push_back(std::move(name)); }
LayerScope::~LayerScope() { State().layers.pop_back(); }

std::string CurrentLayer() {
  const ThreadState& s = State();
  return s.layers.empty() ? "" : s.layers.back();
}

PlanRecorder::PlanRecorder() : previous_(State().recorder) { State().recorder = this; }
PlanRecorder::~PlanRecorder() { State().recorder = previous_; }

namespace {

// An op's policy and compute dtype in the current region and layers, for
// inputs whose widest dtype is `widest`.
struct Resolved {
  CastPolicy policy;
  DType compute;
  bool enabled;  // autocast applies (a region is on and no input is f64)
};

Resolved Resolve(OpId op, DType widest, bool any_f64) {
  const ThreadState& s = State();
  CastPolicy policy = DefaultCastPolicy(op);
  const Region* region = s.regions.empty() ? nullptr : &s.regions.back();
  const bool enabled = region != nullptr && region->enabled && !any_f64;
  if (region != nullptr) {
    auto o = region->overrides.op_policies.find(op);
    if (o != region->overrides.op_policies.end()) policy = o->second;
    if (policy == CastPolicy::kLowerPrecision) {
      for (const std::string& layer : s.layers) {
        if (region->overrides.fp32_layers.count(layer)) policy = CastPolicy::kFp32;
      }
    }
  }
  if (enabled && policy == CastPolicy::kLowerPrecision) return {policy, region->dtype, true};
  if (enabled && policy == CastPolicy::kFp32) return {policy, DType::kF32, true};
  // Promote, pass-through, and everything outside autocast: the widest input.
  return {policy, widest, enabled};
}

// Whether every value of `from` is a value of `to` (a cast would copy only).
bool WidensExactly(DType from, DType to) {
  const bool to_wide = to == DType::kF32 || to == DType::kF64;
  return (core::IsLowPrecision(from) && to_wide) || (from == DType::kF32 && to == DType::kF64);
}

Tensor CastForAutocast(const Tensor& t, DType dtype) {
  ThreadState& s = State();
  const bool cacheable = t.is_leaf() && t.requires_grad() && t.dtype() == DType::kF32 &&
                         dtype != DType::kF32 && GradEnabled();
  if (!cacheable) return Cast(t, dtype);
  auto it = s.cache.find(t.impl());
  if (it != s.cache.end() && it->second.second.dtype() == dtype) return it->second.second;
  Tensor copy = Cast(t, dtype);
  s.cache[t.impl()] = {t, copy};
  return copy;
}

}  // namespace

DType AutocastComputeDType(OpId op, DType widest) {
  return Resolve(op, widest, widest == DType::kF64).compute;
}

OpDispatch::OpDispatch(OpId op, std::vector<Tensor*> inputs)
    : OpDispatch(op, std::move(inputs), {}, /*widen_in_kernel=*/false) {}

OpDispatch::OpDispatch(OpId op, std::vector<Tensor*> inputs, std::vector<const Tensor*> read_as_is)
    : OpDispatch(op, std::move(inputs), std::move(read_as_is), /*widen_in_kernel=*/false) {}

OpDispatch::OpDispatch(OpId op, std::vector<Tensor*> inputs, WidenInKernel)
    : OpDispatch(op, std::move(inputs), {}, /*widen_in_kernel=*/true) {}

OpDispatch::OpDispatch(OpId op, std::vector<Tensor*> inputs, std::vector<const Tensor*> read_as_is,
                       bool widen_in_kernel)
    : op_(op) {
  bool any_f64 = false;
  DType widest = DType::kF32;
  bool first = true;
  std::vector<const Tensor*> all(read_as_is.begin(), read_as_is.end());
  all.insert(all.end(), inputs.begin(), inputs.end());
  for (const Tensor* t : all) {
    if (!IsFloating(*t)) continue;
    input_dtypes_.push_back(t->dtype());
    any_f64 |= t->dtype() == DType::kF64;
    widest = first ? t->dtype() : PromoteTypes(widest, t->dtype());
    first = false;
  }
  const Resolved r = Resolve(op, widest, any_f64);
  policy_ = r.policy;
  compute_ = r.compute;
  const bool enabled = r.enabled;
  for (Tensor* t : inputs) {
    if (!IsFloating(*t) || t->dtype() == compute_) continue;
    if (widen_in_kernel && WidensExactly(t->dtype(), compute_)) continue;
    *t = enabled ? CastForAutocast(*t, compute_) : Cast(*t, compute_);
  }
}

void OpDispatch::Finish(const Tensor& output) {
  ThreadState& s = State();
  if (s.recorder == nullptr) return;
  s.recorder->entries_.push_back(
      {OpName(op_), CurrentLayer(), input_dtypes_, policy_, compute_, output.dtype(),
       output.shape(), output.numel() * static_cast<int64_t>(DTypeSize(output.dtype())), fp8_});
}

}  // namespace ampd::engine::ops
