#include "server/precision_service.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "engine/amp/precision.h"
#include "engine/backend/backend.h"
#include "engine/cpu/bf16_gemm_route.h"
#include "engine/cpu/capabilities.h"
#include "engine/nn/model.h"
#include "engine/runner/job_spec.h"
#include "engine/train/explain.h"
#include "server/rpc_status.h"

namespace ampd::server {

namespace v1 = ::ampd::v1;

namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  return FinishUnary(ctx, status);
}

v1::DType ToProto(engine::DType d) {
  switch (d) {
    case engine::DType::kF32:
      return v1::DTYPE_F32;
    case engine::DType::kF16:
      return v1::DTYPE_F16;
    case engine::DType::kBF16:
      return v1::DTYPE_BF16;
    default:
      return v1::DTYPE_UNSPECIFIED;
  }
}

v1::CastPolicy ToProto(engine::CastPolicy p) {
  switch (p) {
    case engine::CastPolicy::kLowerPrecision:
      return v1::CAST_POLICY_LOWER_PRECISION;
    case engine::CastPolicy::kFp32:
      return v1::CAST_POLICY_FP32;
    case engine::CastPolicy::kPromote:
      return v1::CAST_POLICY_PROMOTE;
    case engine::CastPolicy::kPassThrough:
      return v1::CAST_POLICY_PASS_THROUGH;
  }
  return v1::CAST_POLICY_UNSPECIFIED;
}

std::string ProfileId(const std::string& name) {
  const std::string prefix = "profiles/";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

bool IsBuiltinName(const std::string& id) { return engine::amp::ResolvePrecision(id).ok(); }

v1::PrecisionProfile BuiltinProfile(const std::string& name) {
  v1::PrecisionProfile p;
  p.set_name("profiles/" + name);
  p.set_builtin(true);
  p.mutable_config()->set_base(name);
  const engine::amp::PrecisionConfig c = *engine::amp::ResolvePrecision(name);
  p.set_description(absl::StrCat(
      c.autocast ? absl::StrCat("autocast ", std::string(engine::DTypeName(c.autocast_dtype)))
                 : std::string("no autocast"),
      ", ", std::string(engine::DTypeName(c.param_dtype)), " parameters",
      c.master_weights ? ", f32 master weights" : "", c.keep_norms_fp32 ? ", norms in f32" : "",
      c.loss_scaling.enabled
          ? (c.loss_scaling.dynamic
                 ? absl::StrCat(", dynamic loss scaling from ", c.loss_scaling.init_scale)
                 : absl::StrCat(", static loss scale ", c.loss_scaling.init_scale))
          : "",
      c.fp8
          ? absl::StrCat(
                ", FP8 block linears (",
                c.fp8_recipe.kind == engine::backend::Fp8ScalingKind::kCurrent ? "current"
                                                                               : "delayed",
                " scaling, E4M3 forward, ",
                c.fp8_recipe.format == engine::backend::Fp8FormatRecipe::kHybrid ? "E5M2" : "E4M3",
                " gradients)")
          : ""));
  return p;
}

// Every built-in mode, less those computing in bf16 where bf16 is unavailable
// and the FP8 ones where FP8 is not (`fp8_available`: native FP8, or the
// CPU's emulation).
void AddPrecisionModes(bool bf16_available, bool fp8_available, v1::DeviceInfo* d) {
  for (const std::string& mode : engine::amp::BuiltinPrecisionNames()) {
    const engine::amp::PrecisionConfig c = *engine::amp::ResolvePrecision(mode);
    const bool uses_bf16 = (c.autocast && c.autocast_dtype == engine::DType::kBF16) ||
                           c.param_dtype == engine::DType::kBF16;
    if (uses_bf16 && !bf16_available) continue;
    if (c.fp8 && !fp8_available) continue;
    d->add_precision_modes(mode);
  }
}

v1::DeviceInfo CudaDeviceInfo(const engine::backend::DeviceProperties& gpu) {
  v1::DeviceInfo d;
  d.set_kind(v1::DEVICE_CUDA);
  d.set_name(absl::StrCat("cuda:", gpu.index, " ", gpu.name));
  d.set_compute_capability(absl::StrCat(gpu.major, ".", gpu.minor));
  d.set_memory_bytes(gpu.memory_bytes);
  d.set_bf16_native(gpu.bf16);
  d.set_f16_native(gpu.f16);
  d.set_fp8_native(gpu.fp8);
  d.set_peak_bf16_flops(gpu.peak_bf16_flops);
  AddPrecisionModes(gpu.bf16, gpu.fp8, &d);
  d.set_notes(absl::StrCat(
      gpu.multiprocessors,
      " SMs. GEMMs run in cuBLASLt with f32 accumulation; f32 GEMMs keep TF32 off unless "
      "precision.allow_tf32. Jobs run on device 0.",
      gpu.fp8 ? " FP8 modes: casts and scaling on the device; FP8 GEMMs in cuBLASLt where "
                "k and n are multiples of 16 (f32 GEMMs of the decoded values elsewhere); "
                "unverified on a GPU."
              : " No FP8 tensor cores (compute capability < 8.9): FP8 modes are refused."));
  return d;
}

}  // namespace

v1::DeviceInfo CpuDeviceInfo() {
  const engine::cpu::CpuCapabilities& cpu = engine::cpu::ProbeCpu();
  v1::DeviceInfo d;
  d.set_kind(v1::DEVICE_CPU);
  d.set_name(cpu.name);
  d.set_bf16_native(cpu.avx512_bf16);
  d.set_f16_native(false);
  d.set_fp8_native(false);
  // bf16 runs on every CPU: through oneDNN's bf16 matmul, or widened to f32
  // where that is faster or missing (engine/cpu/bf16_gemm_route.h); the
  // notes say which, and why.
  AddPrecisionModes(/*bf16=*/true, /*fp8_available=*/true, &d);
  if (absl::StatusOr<engine::backend::Backend*> be =
          engine::backend::BackendFor(engine::Device::kCpu);
      be.ok()) {
    d.set_peak_bf16_flops((*be)->PeakFlops());  // measured at start-up
  }
  d.set_notes(absl::StrCat(
      cpu.threads,
      " threads. f16 matmul is computed as f16-rounded inputs with f32 "
      "accumulation (oneDNN 2.6 has no f16 matmul on CPUs); ",
      engine::cpu::ChosenBf16GemmRoute().why,
      engine::cpu::ChosenBf16GemmRoute().route == engine::cpu::Bf16GemmRoute::kWidened ? ""
      : cpu.avx512_bf16 ? " oneDNN's bf16 matmul uses native AVX-512 BF16."
                        : " oneDNN's bf16 matmul is emulated here (no AVX-512 BF16).",
      " FP8 modes run emulated: the same E4M3/E5M2 casts and scaling as a GPU's, bit for bit, "
      "then f32 GEMMs of the decoded values (a correctness reference, not a fast path)."));
  return d;
}

grpc::ServerUnaryReactor* PrecisionServiceImpl::GetCapabilities(grpc::CallbackServerContext* ctx,
                                                                const v1::GetCapabilitiesRequest*,
                                                                v1::Capabilities* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  *response->add_devices() = CpuDeviceInfo();
  absl::StatusOr<engine::backend::Backend*> backend =
      engine::backend::BackendFor(engine::Device::kCuda);
  if (!backend.ok()) {
    response->add_unavailable(std::string(backend.status().message()));
  } else {
    for (const engine::backend::DeviceProperties& gpu : (*backend)->Devices()) {
      *response->add_devices() = CudaDeviceInfo(gpu);
    }
  }
  if (worker_slots_) {
    for (v1::WorkerSlots& w : worker_slots_()) *response->add_workers() = std::move(w);
  }
  response->set_server_version("ampd 0.1.0");
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrecisionServiceImpl::ExplainPrecision(
    grpc::CallbackServerContext* ctx, const v1::ExplainPrecisionRequest* request,
    v1::ExplainPrecisionResponse* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  if (request->batch_size() < 0) return Done(ctx, InvalidField("batch_size", "must be >= 0"));
  v1::JobSpec spec;
  *spec.mutable_model() = request->model();
  *spec.mutable_data() = request->data();
  *spec.mutable_optimizer() = request->optimizer();
  *spec.mutable_precision() = request->precision();
  engine::runner::JobSpecContext context;
  context.profiles = [this, &who](const std::string& name) -> std::optional<v1::PrecisionConfig> {
    auto p = profiles_->Get(name);
    if (!p || !who.CanSee(p->owner())) return std::nullopt;
    return p->config();
  };
  std::vector<engine::runner::FieldViolation> violations =
      engine::runner::ValidateJobSpec(spec, context);
  if (!violations.empty()) return Done(ctx, InvalidArgument(violations));
  absl::StatusOr<engine::runner::ResolvedJob> job = engine::runner::ResolveJobSpec(spec, context);
  if (!job.ok()) return Done(ctx, ToGrpc(job.status()));
  if (!engine::nn::DataDimsKnown(job->config.model)) {  // only an MLP's can be unknown
    return Done(ctx, InvalidField("model.mlp.input_dim",
                                  "required (with num_classes) when the data is a file"));
  }
  std::vector<engine::amp::PrecisionConfig> modes;
  if (request->has_precision()) {
    modes.push_back(job->config.precision);
  } else {
    // The FP8 modes only for a model with FP8 GEMMs (a transformer).
    const bool transformer = engine::nn::IsLanguageModel(job->config.model);
    for (const std::string& name : engine::amp::BuiltinPrecisionNames()) {
      engine::amp::PrecisionConfig mode = *engine::amp::ResolvePrecision(name);
      if (mode.fp8 && !transformer) continue;
      modes.push_back(std::move(mode));
    }
  }
  const int64_t batch = request->batch_size() ? request->batch_size() : 128;
  for (const engine::amp::PrecisionConfig& mode : modes) {
    absl::StatusOr<engine::train::PrecisionPlan> plan =
        engine::train::ExplainPrecision(job->config.model, mode, job->config.optimizer, batch);
    if (!plan.ok()) return Done(ctx, ToGrpc(plan.status()));
    v1::PrecisionExplanation* e = response->add_explanations();
    e->set_precision(plan->precision);
    e->set_parameter_count(plan->parameter_count);
    for (const engine::ops::PlanEntry& op : plan->ops) {
      v1::OpPlan* o = e->add_ops();
      o->set_op(op.op);
      o->set_layer(op.layer);
      for (engine::DType d : op.input_dtypes) o->add_input_dtypes(ToProto(d));
      o->set_policy(ToProto(op.policy));
      o->set_compute_dtype(ToProto(op.compute_dtype));
      o->set_output_dtype(ToProto(op.output_dtype));
      o->set_output_bytes(op.output_bytes);
      if (op.fp8) {
        v1::Fp8Operands* f = o->mutable_fp8();
        f->set_input(engine::core::Fp8FormatName(op.fp8->input));
        f->set_weight(engine::core::Fp8FormatName(op.fp8->weight));
        f->set_grad_output(engine::core::Fp8FormatName(op.fp8->grad_output));
        f->set_scaling(op.fp8->current_scaling ? "current" : "delayed");
      }
    }
    const engine::train::MemoryEstimate& m = plan->memory;
    v1::MemoryEstimate* pm = e->mutable_memory();
    pm->set_weights_bytes(m.weights_bytes);
    pm->set_master_weights_bytes(m.master_weights_bytes);
    pm->set_gradients_bytes(m.gradients_bytes);
    pm->set_optimizer_state_bytes(m.optimizer_state_bytes);
    pm->set_activation_bytes(m.activation_bytes);
    pm->set_total_bytes(m.total_bytes());
  }
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrecisionServiceImpl::CreateProfile(
    grpc::CallbackServerContext* ctx, const v1::CreateProfileRequest* request,
    v1::PrecisionProfile* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  static const std::regex kId("[a-z][a-z0-9-]{0,62}");
  const std::string& id = request->profile_id();
  std::vector<engine::runner::FieldViolation> violations;
  if (!std::regex_match(id, kId)) {
    violations.push_back({"profile_id", "must match [a-z][a-z0-9-]{0,62}"});
  } else if (IsBuiltinName(id)) {
    violations.push_back({"profile_id", absl::StrCat("\"", id, "\" is a built-in mode name")});
  }
  engine::runner::PrecisionFromProto(request->profile().config(), "profile.config", &violations);
  if (!violations.empty()) return Done(ctx, InvalidArgument(violations));
  v1::PrecisionProfile profile = request->profile();
  profile.set_name("profiles/" + id);
  profile.set_builtin(false);
  profile.set_owner(who.name);
  absl::Status s = profiles_->Create(id, profile);
  if (!s.ok()) return Done(ctx, ToGrpc(s));
  *response = profile;
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrecisionServiceImpl::GetProfile(grpc::CallbackServerContext* ctx,
                                                           const v1::GetProfileRequest* request,
                                                           v1::PrecisionProfile* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  const std::string id = ProfileId(request->name());
  if (id.empty()) return Done(ctx, InvalidField("name", "required"));
  if (IsBuiltinName(id)) {
    *response = BuiltinProfile(engine::amp::ResolvePrecision(id)->name);
    return Done(ctx, grpc::Status::OK);
  }
  auto p = profiles_->Get(id);
  if (!p || !who.CanSee(p->owner())) return Done(ctx, NotFound("profile", request->name()));
  *response = *p;
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrecisionServiceImpl::ListProfiles(grpc::CallbackServerContext* ctx,
                                                             const v1::ListProfilesRequest*,
                                                             v1::ListProfilesResponse* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  for (const std::string& name : engine::amp::BuiltinPrecisionNames()) {
    *response->add_profiles() = BuiltinProfile(name);
  }
  for (auto& p : profiles_->List()) {
    if (who.CanSee(p.owner())) *response->add_profiles() = std::move(p);
  }
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrecisionServiceImpl::DeleteProfile(
    grpc::CallbackServerContext* ctx, const v1::DeleteProfileRequest* request,
    google::protobuf::Empty*) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  const std::string id = ProfileId(request->name());
  if (id.empty()) return Done(ctx, InvalidField("name", "required"));
  if (IsBuiltinName(id)) {
    return Done(ctx, FailedPrecondition(
                         "name", absl::StrCat("\"", id, "\" is built in and cannot be deleted")));
  }
  auto p = profiles_->Get(id);
  if (!p || !who.CanSee(p->owner()) || !profiles_->Delete(id)) {
    return Done(ctx, NotFound("profile", request->name()));
  }
  return Done(ctx, grpc::Status::OK);
}

}  // namespace ampd::server
