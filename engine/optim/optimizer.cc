#include "engine/optim/optimizer.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/backend/quant_map.h"
#include "engine/core/error_subject.h"

namespace ampd::engine::optim {

using backend::AdamW8bitParam;
using backend::AdamW8bitStepKernel;
using backend::AdamW8bitStepListKernel;
using backend::Backend;
using backend::BackendOf;
using backend::CastKernel;
using backend::DynamicMap;
using backend::Kernel;
using backend::NearestCode;
using backend::QuantBlocks;
using backend::Sgd8bitParam;
using backend::Sgd8bitStepKernel;
using backend::Sgd8bitStepListKernel;
using backend::UnsignedDynamicMap;
using core::FieldError;
using core::ShapeString;
using nn::Parameter;

absl::Status ValidateOptimizerSpec(const OptimizerSpec& s) {
  auto bad = [](const char* field, double v, const char* why) {
    return FieldError(absl::StrCat("optimizer.", field), absl::StrCat(why, ", got ", v));
  };
  if (!(s.lr > 0) || !std::isfinite(s.lr)) return bad("lr", s.lr, "must be a finite number > 0");
  if (!(s.weight_decay >= 0)) return bad("weight_decay", s.weight_decay, "must be >= 0");
  if (!(s.momentum >= 0 && s.momentum < 1)) return bad("momentum", s.momentum, "must be in [0, 1)");
  if (s.nesterov && s.momentum == 0) {
    return FieldError("optimizer.nesterov", "requires momentum > 0");
  }
  if (!(s.beta1 >= 0 && s.beta1 < 1)) return bad("beta1", s.beta1, "must be in [0, 1)");
  if (!(s.beta2 >= 0 && s.beta2 < 1)) return bad("beta2", s.beta2, "must be in [0, 1)");
  if (!(s.eps > 0)) return bad("eps", s.eps, "must be > 0");
  if (s.state_bits != 8 && s.state_bits != 32) {
    return FieldError(s.kind == OptimizerSpec::Kind::kSgd ? "optimizer.sgd.state_bits"
                                                          : "optimizer.adamw.state_bits",
                      absl::StrCat("must be 32 or 8, got ", s.state_bits));
  }
  if (s.min_8bit_size < 0) {
    return FieldError("optimizer.min_8bit_size",
                      absl::StrCat("must be >= 0, got ", s.min_8bit_size));
  }
  return absl::OkStatus();
}

bool UsesEightBitStates(const OptimizerSpec& spec, int64_t numel, const std::string& layer) {
  if (spec.state_bits != 8 || numel < spec.min_8bit_size) return false;
  if (spec.kind == OptimizerSpec::Kind::kSgd && spec.momentum == 0) return false;  // no state
  return spec.fp32_state_layers.count(layer) == 0;
}

int64_t StateBytes(const OptimizerSpec& spec, int64_t numel, const std::string& layer) {
  return UsesEightBitStates(spec, numel, layer) ? numel + 4 * QuantBlocks(numel) : 4 * numel;
}

double ScheduledLearningRate(const ScheduleSpec& schedule, double base_lr, int64_t step,
                             int64_t total_steps) {
  if (schedule.kind == ScheduleSpec::Kind::kConstant) return base_lr;
  if (step < schedule.warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  }
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - schedule.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - schedule.warmup_steps) / decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return base_lr * (schedule.min_lr_ratio + (1.0 - schedule.min_lr_ratio) * cosine);
}

namespace {

Backend::SgdHyper SgdHyperFor(const OptimizerSpec& spec, double lr) {
  Backend::SgdHyper h;
  h.lr = static_cast<float>(lr);
  h.momentum = static_cast<float>(spec.momentum);
  h.weight_decay = static_cast<float>(spec.weight_decay);
  h.nesterov = spec.nesterov;
  return h;
}

Backend::AdamWHyper AdamWHyperFor(const OptimizerSpec& spec, double lr, int64_t step) {
  Backend::AdamWHyper h;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(spec.beta1);
  h.beta2 = static_cast<float>(spec.beta2);
  h.eps = static_cast<float>(spec.eps);
  h.weight_decay = static_cast<float>(spec.weight_decay);
  h.step = step;  // the fused step takes it from the device counter instead
  return h;
}

}  // namespace

Optimizer::Optimizer(const OptimizerSpec& spec, std::vector<Parameter>* params, bool master_weights)
    : spec_(spec), params_(params), master_(master_weights) {
  for (Parameter& p : *params_) {
    const Tensor& v = p.value;
    // Norm parameters Apex O2 keeps in f32 need no separate master copy.
    const Device dev = v.device();
    weights_.push_back(
        master_ && v.dtype() != DType::kF32 ? Tensor::Zeros(v.shape(), DType::kF32, dev) : v);
    if (weights_.back().impl() != v.impl()) weights_.back().CopyFrom(v);
    const bool adamw = spec.kind == OptimizerSpec::Kind::kAdamW;
    if (UsesEightBitStates(spec, v.numel(), p.layer)) {
      // Zero states: every code is the map's 0 (absmax 0 makes them 0 anyway).
      const int64_t n = v.numel();
      codes1_.push_back(Tensor::Full({n}, DType::kU8, NearestCode(DynamicMap(), 0.0f)).To(dev));
      absmax1_.push_back(Tensor::Zeros({QuantBlocks(n)}, DType::kF32, dev));
      codes2_.push_back(
          adamw ? Tensor::Full({n}, DType::kU8, NearestCode(UnsignedDynamicMap(), 0.0f)).To(dev)
                : Tensor());
      absmax2_.push_back(adamw ? Tensor::Zeros({QuantBlocks(n)}, DType::kF32, dev) : Tensor());
      buf1_.emplace_back();
      buf2_.emplace_back();
      continue;
    }
    codes1_.emplace_back();
    absmax1_.emplace_back();
    codes2_.emplace_back();
    absmax2_.emplace_back();
    buf1_.push_back(Tensor::Zeros(v.shape(), DType::kF32, dev));
    buf2_.push_back(adamw ? Tensor::Zeros(v.shape(), DType::kF32, dev) : Tensor());
  }
  if (has_8bit_states()) {
    // The maps' identity goes into checkpoints with the values themselves.
    auto map_tensor = [](const std::array<float, 256>& map) {
      return Tensor::FromVector(std::vector<float>(map.begin(), map.end()), {256}, DType::kF32);
    };
    quant_maps_.emplace_back(std::string("quant_map/") + backend::kDynamicMapName,
                             map_tensor(DynamicMap()));
    if (spec.kind == OptimizerSpec::Kind::kAdamW) {
      quant_maps_.emplace_back(std::string("quant_map/") + backend::kUnsignedDynamicMapName,
                               map_tensor(UnsignedDynamicMap()));
    }
  }
}

bool Optimizer::has_8bit_states() const {
  for (const Tensor& c : codes1_) {
    if (c.defined()) return true;
  }
  return false;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto* v : {&buf1_, &buf2_, &codes1_, &absmax1_, &codes2_, &absmax2_}) {
    for (const Tensor& t : *v) {
      if (t.defined()) n += t.nbytes();
    }
  }
  // SGD without momentum keeps no state (buf1_ exists but is never read).
  if (spec_.kind == OptimizerSpec::Kind::kSgd && spec_.momentum == 0) n = 0;
  return n;
}

std::vector<Tensor> Optimizer::CollectGradients() {
  grads_.clear();
  for (size_t i = 0; i < params_->size(); ++i) {
    Tensor g = (*params_)[i].value.grad();
    if (g.defined() && weights_[i].impl() != (*params_)[i].value.impl()) {
      g = Kernel<CastKernel>(g.device())(g, DType::kF32);
    }
    grads_.push_back(g);
  }
  return grads_;
}

std::vector<std::string> Optimizer::ParameterNames() const {
  std::vector<std::string> names;
  for (const Parameter& p : *params_) names.push_back(p.name);
  return names;
}

void Optimizer::Step(double lr) {
  ++steps_;
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (i >= grads_.size() || !grads_[i].defined()) continue;
    Backend& be = BackendOf(weights_[i]);
    const Device dev = weights_[i].device();
    if (spec_.kind == OptimizerSpec::Kind::kSgd) {
      Backend::SgdHyper h = SgdHyperFor(spec_, lr);
      if (!(*params_)[i].weight_decay) h.weight_decay = 0;
      if (codes1_[i].defined()) {
        Kernel<Sgd8bitStepKernel>(dev)(weights_[i], grads_[i], codes1_[i], absmax1_[i], h,
                                       steps_ == 1, Backend::FusedStepArgs{});
      } else {
        be.SgdStep(weights_[i], grads_[i], buf1_[i], h, steps_ == 1);
      }
    } else {
      Backend::AdamWHyper h = AdamWHyperFor(spec_, lr, steps_);
      if (!(*params_)[i].weight_decay) h.weight_decay = 0;
      if (codes1_[i].defined()) {
        Kernel<AdamW8bitStepKernel>(dev)(weights_[i], grads_[i], codes1_[i], absmax1_[i],
                                         codes2_[i], absmax2_[i], h, Backend::FusedStepArgs{});
      } else {
        be.AdamWStep(weights_[i], grads_[i], buf1_[i], buf2_[i], h);
      }
    }
    const Tensor& model_copy = (*params_)[i].value;
    if (model_copy.impl() != weights_[i].impl()) model_copy.CopyFrom(weights_[i]);
  }
}

void Optimizer::StepFused(double lr, const Tensor& found_inf) {
  if (weights_.empty()) return;
  Backend& be = BackendOf(weights_[0]);
  if (!device_step_.defined()) {
    device_step_ = Tensor::Zeros({1}, DType::kF32, weights_[0].device());
  }
  // The steps applied before this one. The host's count is exact here: the
  // previous step's skip flag was read with its metrics.
  be.Fill(device_step_, static_cast<double>(steps_));
  ++steps_;
  // The AdamW updates go to the backend as two lists, the 32-bit and the
  // 8-bit ones, and SGD's 8-bit ones as a list (a launch for many parameters
  // on a device).
  std::vector<Backend::AdamWParam> adamw_list;
  std::vector<AdamW8bitParam> adamw8bit_list;
  std::vector<Sgd8bitParam> sgd8bit_list;
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (i >= grads_.size() || !grads_[i].defined()) continue;
    Backend::FusedStepArgs args;
    args.found_inf = found_inf;
    const Tensor& model_copy = (*params_)[i].value;
    if (model_copy.impl() != weights_[i].impl()) args.model_copy = model_copy;
    if (spec_.kind == OptimizerSpec::Kind::kSgd) {
      if (codes1_[i].defined()) {
        sgd8bit_list.push_back({weights_[i], grads_[i], codes1_[i], absmax1_[i], args.model_copy,
                                (*params_)[i].weight_decay});
      } else {
        Backend::SgdHyper h = SgdHyperFor(spec_, lr);
        if (!(*params_)[i].weight_decay) h.weight_decay = 0;
        be.SgdStepFused(weights_[i], grads_[i], buf1_[i], h, steps_ == 1, args);
      }
    } else if (codes1_[i].defined()) {
      adamw8bit_list.push_back({weights_[i], grads_[i], codes1_[i], absmax1_[i], codes2_[i],
                                absmax2_[i], args.model_copy, (*params_)[i].weight_decay});
    } else {
      adamw_list.push_back({weights_[i], grads_[i], buf1_[i], buf2_[i], args.model_copy,
                            (*params_)[i].weight_decay});
    }
  }
  if (!adamw_list.empty()) {
    be.AdamWStepFusedList(adamw_list, AdamWHyperFor(spec_, lr, steps_), found_inf, device_step_);
  }
  if (!adamw8bit_list.empty()) {
    Kernel<AdamW8bitStepListKernel>(be.device())(adamw8bit_list, AdamWHyperFor(spec_, lr, steps_),
                                                 found_inf, device_step_);
  }
  if (!sgd8bit_list.empty()) {
    Kernel<Sgd8bitStepListKernel>(be.device())(sgd8bit_list, SgdHyperFor(spec_, lr), steps_ == 1,
                                               found_inf);
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::StateTensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const bool adamw = spec_.kind == OptimizerSpec::Kind::kAdamW;
  for (size_t i = 0; i < params_->size(); ++i) {
    const std::string& name = (*params_)[i].name;
    if (weights_[i].impl() != (*params_)[i].value.impl())
      out.emplace_back("master/" + name, weights_[i]);
    if (codes1_[i].defined()) {
      const std::string first = adamw ? "exp_avg" : "momentum";
      out.emplace_back(first + ".codes/" + name, codes1_[i]);
      out.emplace_back(first + ".absmax/" + name, absmax1_[i]);
      if (adamw) {
        out.emplace_back("exp_avg_sq.codes/" + name, codes2_[i]);
        out.emplace_back("exp_avg_sq.absmax/" + name, absmax2_[i]);
      }
    } else if (adamw) {
      out.emplace_back("exp_avg/" + name, buf1_[i]);
      out.emplace_back("exp_avg_sq/" + name, buf2_[i]);
    } else if (spec_.momentum != 0) {
      out.emplace_back("momentum/" + name, buf1_[i]);
    }
  }
  for (const auto& m : quant_maps_) out.push_back(m);
  return out;
}

absl::Status Optimizer::CheckState(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                   int64_t steps_taken) const {
  if (steps_taken < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state: the step count is negative (", steps_taken, ")"));
  }
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  for (const auto& [name, target] : StateTensors()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state: missing tensor ", name));
    }
    if (it->second.shape() != target.shape() || it->second.dtype() != target.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state: tensor ", name, " is ", std::string(DTypeName(it->second.dtype())),
          ShapeString(it->second.shape()), ", expected ", std::string(DTypeName(target.dtype())),
          ShapeString(target.shape())));
    }
  }
  for (const auto& [name, map] : quant_maps_) {
    // The codes mean these values: a checkpoint written with other maps
    // cannot be continued with these (a NaN compares unequal too).
    if (by_name.at(name).ToDoubles() != map.ToDoubles()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state: the checkpoint's ", name,
                                                     " differs from this build's code map"));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::LoadState(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                  int64_t steps_taken) {
  if (absl::Status s = CheckState(tensors, steps_taken); !s.ok()) return s;
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  for (const auto& [name, target] : StateTensors()) {
    if (name.rfind("quant_map/", 0) != 0) target.CopyFrom(by_name.at(name));
  }
  // Low-precision model copies follow their (restored) masters.
  for (size_t i = 0; i < params_->size(); ++i) {
    if (weights_[i].impl() != (*params_)[i].value.impl()) (*params_)[i].value.CopyFrom(weights_[i]);
  }
  steps_ = steps_taken;
  return absl::OkStatus();
}

void Optimizer::ZeroGrad() {
  for (Parameter& p : *params_) p.value.set_grad(Tensor());
  grads_.clear();
}

}  // namespace ampd::engine::optim
