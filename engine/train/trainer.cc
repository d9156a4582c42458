#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/embedding.h"
#include "engine/backend/kernels/fp8.h"
#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/core/error_subject.h"
#include "engine/ops/autocast.h"
#include "engine/ops/cast.h"
#include "engine/ops/dropout.h"
#include "engine/ops/ops.h"

namespace ampd::engine::train {

using amp::GradScalerOptions;
using amp::PrecisionConfig;
using amp::SkipEvent;
using amp::ValidatePrecision;
using autograd::Backward;
using autograd::NoGradGuard;
using backend::AddInPlaceKernel;
using backend::Backend;
using backend::BackendFor;
using backend::BackendOf;
using backend::CastKernel;
using backend::EmbeddingKernel;
using backend::Kernel;
using backend::ScaleUpdateOptions;
using core::FieldError;
using core::SubjectError;
using nn::BuildModel;
using nn::CheckDataDims;
using nn::Classifier;
using nn::DescribeModel;
using nn::IsLanguageModel;
using nn::LanguageModel;
using nn::Model;
using nn::ModelOps;
using nn::ModelShape;
using nn::Parameter;
using nn::ValidateModelSpec;
using ops::AutocastScope;
using ops::Mul;
using ops::MulScalar;
using ops::OpName;
using ops::SoftmaxCrossEntropy;
using optim::Optimizer;
using optim::ScheduledLearningRate;
using optim::ValidateOptimizerSpec;

namespace {

// The name of the first parameter whose gradient holds inf/NaN ("" if none).
std::string FirstNonFinite(const std::vector<Tensor>& grads,
                           const std::vector<std::string>& names) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    for (double v : grads[i].ToDoubles()) {
      if (!std::isfinite(v)) return i < names.size() ? names[i] : absl::StrCat("parameter #", i);
    }
  }
  return "";
}

// Checkpoints are host tensors whatever device trained them.
Tensor HostCopy(const Tensor& t) {
  return t.device() == Device::kCpu ? t.Clone() : t.To(Device::kCpu);
}

absl::Status Bad(const std::string& field, const std::string& why) {
  return FieldError(field, why);
}

// A language model's trainer has no classification set; its Batcher is
// never drawn from.
const data::Dataset& NoExamples() {
  static const data::Dataset* none = new data::Dataset();
  return *none;
}

}  // namespace

absl::Status ValidateTrainerConfig(const TrainerConfig& c) {
  if (absl::Status s = ValidateModelSpec(c.model); !s.ok()) return s;
  if (absl::Status s = ValidatePrecision(c.precision); !s.ok()) return s;
  if (absl::Status s = ValidateOptimizerSpec(c.optimizer); !s.ok()) return s;
  const TrainingSpec& t = c.training;
  if (t.steps < 0) return Bad("training.steps", absl::StrCat("must be >= 0, got ", t.steps));
  if (t.steps == 0 && t.epochs <= 0) {
    return Bad("training.epochs", absl::StrCat("must be >= 1 when steps is 0, got ", t.epochs));
  }
  if (t.batch_size < 1) {
    return Bad("training.batch_size", absl::StrCat("must be >= 1, got ", t.batch_size));
  }
  if (t.grad_accumulation < 1) {
    return Bad("training.grad_accumulation",
               absl::StrCat("must be >= 1, got ", t.grad_accumulation));
  }
  if (t.eval_interval < 0) {
    return Bad("training.eval_interval", absl::StrCat("must be >= 0, got ", t.eval_interval));
  }
  if (!(t.clip_norm >= 0)) {
    return Bad("training.clip_norm", absl::StrCat("must be >= 0, got ", t.clip_norm));
  }
  if (c.schedule.warmup_steps < 0) {
    return Bad("schedule.warmup_steps",
               absl::StrCat("must be >= 0, got ", c.schedule.warmup_steps));
  }
  if (c.precision.fp8 && !IsLanguageModel(c.model)) {
    return Bad("precision", "FP8 runs a transformer's block linears; this model has none");
  }
  if (const dist::ProcessGroup* g = c.process_group; g != nullptr && g->size() > 1) {
    if (t.batch_size % g->size() != 0) {
      return Bad("training.batch_size",
                 absl::StrCat("must be a multiple of the ", g->size(),
                              " workers (each takes an equal share of the global batch), got ",
                              t.batch_size));
    }
    if (c.device != Device::kCpu && !g->device_memory()) {
      return Bad("device",
                 "data-parallel training on a GPU needs an NCCL process group (its collectives "
                 "take device memory), not Gloo's");
    }
    if (c.device == Device::kCpu && g->device_memory()) {
      return Bad("device", "an NCCL process group reduces device memory; this job is on the CPU");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckKernels(const TrainerConfig& config, const Backend& backend) {
  std::vector<OpId> ops = ModelOps(config.model);
  // The step's own: a classifier's loss (a language model's is its own op),
  // the loss scaling and the accumulation.
  if (!IsLanguageModel(config.model)) ops.push_back(OpId::kCrossEntropy);
  for (OpId op : {OpId::kMulScalar, OpId::kAdd}) ops.push_back(op);
  if (config.precision.fp8) {
    // A device with no FP8 tensor cores is refused, not emulated: only the
    // CPU runs FP8 emulated (and says so in GetCapabilities).
    if (backend.device() != Device::kCpu) {
      const std::vector<backend::DeviceProperties> devices =
          const_cast<Backend&>(backend).Devices();
      if (devices.empty() || !devices[0].fp8) {
        return SubjectError(
            absl::StatusCode::kFailedPrecondition, "precision",
            absl::StrCat("precision ", config.precision.name,
                         " needs FP8 tensor cores (compute capability "
                         "8.9 or later); ",
                         devices.empty() ? std::string("the device reports none")
                                         : absl::StrCat(devices[0].name, " is ", devices[0].major,
                                                        ".", devices[0].minor),
                         ". Use bf16-mixed there, or the CPU, where FP8 runs emulated"));
      }
    }
    ops.push_back(OpId::kFp8Linear);
    if (!backend::KernelRegistered<backend::Fp8UpdateScalingKernel>(backend.device())) {
      return SubjectError(
          absl::StatusCode::kFailedPrecondition, "precision",
          absl::StrCat("the ", backend.name(), " backend has no FP8 scaling update kernel"));
    }
  }
  if (config.optimizer.state_bits == 8) {
    const bool sgd = config.optimizer.kind == optim::OptimizerSpec::Kind::kSgd;
    const bool has =
        sgd ? backend::KernelRegistered<backend::Sgd8bitStepKernel>(backend.device()) &&
                  backend::KernelRegistered<backend::Sgd8bitStepListKernel>(backend.device())
            : backend::KernelRegistered<backend::AdamW8bitStepKernel>(backend.device()) &&
                  backend::KernelRegistered<backend::AdamW8bitStepListKernel>(backend.device());
    if (!has) {
      return SubjectError(
          absl::StatusCode::kFailedPrecondition,
          sgd ? "optimizer.sgd.state_bits" : "optimizer.adamw.state_bits",
          absl::StrCat("the ", backend.name(), " backend has no 8-bit optimizer step kernel"));
    }
  }
  for (OpId op : ops) {
    if (!backend.HasKernel(op)) {
      return SubjectError(absl::StatusCode::kFailedPrecondition, "device",
                          absl::StrCat("op ", OpName(op), " has no ",
                                       backend.device() == Device::kCuda ? "CUDA" : "CPU",
                                       " kernel (", backend.name(), " backend)"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The model, with the config's initial weights (if any) over its own
// initialisation: every parameter from its name, cast to its dtype.
absl::StatusOr<std::unique_ptr<Model>> BuildWithWeights(const TrainerConfig& config) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      BuildModel(config.model, config.precision, config.training.seed);
  if (!model.ok() || config.initial_weights.empty()) return model;
  // The parameters, then the buffers (batch norm's running statistics).
  std::vector<Parameter*> params;
  for (Parameter& p : (*model)->parameters()) params.push_back(&p);
  for (Parameter& b : (*model)->buffers()) params.push_back(&b);
  if (params.size() != config.initial_weights.size()) {
    return Bad("init_from",
               absl::StrCat("has ", config.initial_weights.size(), " tensors; the model has ",
                            params.size(), " parameters and buffers"));
  }
  for (Parameter* q : params) {
    Parameter& p = *q;
    auto it = config.initial_weights.find(p.name);
    if (it == config.initial_weights.end()) {
      return Bad("init_from", "has no tensor " + p.name);
    }
    if (it->second.shape() != p.value.shape()) {
      return Bad("init_from", "tensor " + p.name + " has the wrong shape");
    }
    p.value.CopyFrom(it->second.dtype() == p.value.dtype()
                         ? it->second
                         : Kernel<CastKernel>(Device::kCpu)(it->second, p.value.dtype()));
  }
  return model;
}

// What both Create()s check first: the config's fields, then that its device
// is usable and has every kernel the job runs.
absl::Status CheckConfigAndDevice(const TrainerConfig& config) {
  if (absl::Status s = ValidateTrainerConfig(config); !s.ok()) return s;
  absl::StatusOr<Backend*> backend = BackendFor(config.device);
  if (!backend.ok()) return backend.status();
  return CheckKernels(config, **backend);
}

}  // namespace

namespace {

// Image transforms need image examples, and per-channel values for their
// channels (one value, or one per channel).
absl::Status CheckTransforms(const data::ImageTransforms& t, const data::Dataset& train) {
  if (!t.normalizes() && !t.augments()) return absl::OkStatus();
  const std::string field = t.augments() ? "data.augment" : "data.normalize";
  if (train.example_shape.size() != 3) {
    return Bad(field, absl::StrCat("transforms images [channels, height, width]; this data set's "
                                   "examples are vectors of ",
                                   train.feature_dim, " values"));
  }
  const int64_t channels = train.example_shape[0];
  for (const auto& [name, v] : {std::make_pair("mean", &t.mean), std::make_pair("std", &t.std)}) {
    const int64_t n = static_cast<int64_t>(v->size());
    if (t.normalizes() && n != 1 && n != channels) {
      return Bad(absl::StrCat("data.normalize.", name),
                 absl::StrCat("has ", n, " values; the images have ", channels,
                              " channels (give one value, or one per channel)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerConfig& config,
                                                         const data::Dataset* train,
                                                         const data::Dataset* test) {
  if (absl::Status s = CheckConfigAndDevice(config); !s.ok()) return s;
  if (IsLanguageModel(config.model)) {
    return Bad("data", "a language model (model.gpt) trains on token data (data.tokens)");
  }
  for (const data::Dataset* d : {train, test}) {
    if (d == nullptr) continue;
    if (absl::Status s = CheckDataDims(config.model, d->feature_dim, d->num_classes); !s.ok()) {
      return s;
    }
  }
  if (train == nullptr || train->num_examples < config.training.batch_size) {
    return Bad("training.batch_size", absl::StrCat("is larger than the training set (",
                                                   train ? train->num_examples : 0, " examples)"));
  }
  if (absl::Status s = CheckTransforms(config.transforms, *train); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Model>> model = BuildWithWeights(config);
  if (!model.ok()) return model.status();
  return std::unique_ptr<Trainer>(new Trainer(config, train, test, *std::move(model)));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerConfig& config,
                                                         const TokenData& tokens) {
  if (absl::Status s = CheckConfigAndDevice(config); !s.ok()) return s;
  if (!IsLanguageModel(config.model)) {
    return Bad("data", "token data (data.tokens) trains a language model (model.gpt)");
  }
  const int64_t block = DescribeModel(config.model).tokens_per_example;
  if (tokens.train.empty()) return Bad("data.tokens", "has no training tokens");
  absl::StatusOr<data::TokenWindows> windows =
      data::TokenWindows::Create(tokens.train, block, config.training.seed ^ 0x70c5ull);
  if (!windows.ok()) {
    return Bad("model.gpt.block_size", std::string(windows.status().message()));
  }
  if (tokens.val != nullptr && tokens.val->size() < block + 1) {
    return Bad("data.tokens",
               absl::StrCat("the validation tokens (", tokens.val->size(),
                            ") are fewer than one window of block_size + 1 = ", block + 1,
                            " (a larger held_out_fraction or val shard is needed)"));
  }
  if (tokens.eval_windows < 0) {
    return Bad("data.tokens.eval_windows", absl::StrCat("must be >= 0, got ", tokens.eval_windows));
  }
  absl::StatusOr<std::unique_ptr<Model>> model = BuildWithWeights(config);
  if (!model.ok()) return model.status();
  std::unique_ptr<Trainer> t(new Trainer(config, nullptr, nullptr, *std::move(model)));
  t->tokens_ = tokens;
  t->windows_ = *std::move(windows);
  for (const data::TokenSequence* shard : tokens.train) t->train_tokens_ += shard->size();
  if (tokens.val != nullptr) {
    t->eval_batches_ =
        data::EvalWindows(*tokens.val, block, config.training.batch_size, tokens.eval_windows);
  }
  t->ComputeTotalSteps();
  return t;
}
Trainer::Trainer(const TrainerConfig& config, const data::Dataset* train, const data::Dataset* test,
                 std::unique_ptr<Model> model)
    : config_(config),
      train_(train),
      test_(test),
      model_(std::move(model)),
      scaler_(config.precision.loss_scaling),
      batcher_(train != nullptr ? train : &NoExamples(), config.training.batch_size,
               config.training.seed ^ 0x5eedull) {
  classifier_ = model_->AsClassifier();
  lm_ = model_->AsLanguageModel();
  const ModelShape shape = DescribeModel(config.model);
  flops_per_example_ = shape.flops_per_example;
  tokens_per_example_ = shape.tokens_per_example;
  if (config.device != Device::kCpu) {
    absl::StatusOr<Backend*> be = BackendFor(config.device);
    device_backend_ = be.ok() ? *be : nullptr;
  }
  if (device_backend_ != nullptr) {
    for (Parameter& p : model_->parameters()) {
      Tensor moved = p.value.To(config.device);
      moved.set_requires_grad(p.value.requires_grad());
      moved.set_name(p.value.name());
      p.value = moved;
    }
    for (Parameter& b : model_->buffers()) b.value = b.value.To(config.device);
    if (nn::Fp8State* fp8 = model_->fp8()) *fp8 = fp8->To(config.device);
    amp_.scale = Tensor::Zeros({1}, DType::kF32, config.device);
    amp_.growth_tracker = Tensor::Zeros({1}, DType::kF32, config.device);
    amp_.found_inf = Tensor::Zeros({1}, DType::kF32, config.device);
    scale_used_ = Tensor::Zeros({1}, DType::kF32, config.device);
    sum_sq_ = Tensor::Zeros({1}, DType::kF32, config.device);
    loss_sum_ = Tensor::Zeros({}, DType::kF64, config.device);  // summed in f64, as on the CPU
    PushScalerStateToDevice();
    const int64_t bytes =
        train ? train->num_examples * train->feature_dim * int64_t{sizeof(float)} : 0;
    const bool transformed = config.transforms.normalizes() || config.transforms.augments();
    if (bytes > 0 && bytes <= config.device_dataset_max_bytes && !transformed &&
        train->num_examples <= std::numeric_limits<int32_t>::max()) {
      device_features_ = ToDevice(train->features, train->num_examples, train->feature_dim);
      batcher_.set_gather_features(false);
    }
  }
  optimizer_ = std::make_unique<Optimizer>(config.optimizer, &model_->parameters(),
                                           config.precision.master_weights);
  peak_flops_ = config.peak_flops;
  if (peak_flops_ <= 0) {
    absl::StatusOr<Backend*> be = BackendFor(config.device);
    if (be.ok()) peak_flops_ = (*be)->PeakFlops();
  }
  ComputeTotalSteps();
}

int64_t Trainer::BatchesPerEpoch() const {
  if (lm_ != nullptr) {
    // An epoch is as many windows as the training tokens hold side by side.
    const int64_t per_batch = config_.training.batch_size * tokens_per_example_;
    return per_batch > 0 ? train_tokens_ / per_batch : 0;
  }
  return batcher_.batches_per_epoch();
}

int64_t Trainer::Epoch() const {
  if (lm_ != nullptr) {
    const int64_t per_epoch = BatchesPerEpoch() * config_.training.batch_size;
    return per_epoch > 0 ? windows_->position() / per_epoch : 0;
  }
  return batcher_.position().epoch;
}

void Trainer::ComputeTotalSteps() {
  const TrainingSpec& t = config_.training;
  total_steps_ = t.steps > 0
                     ? t.steps
                     : std::max<int64_t>(1, t.epochs * BatchesPerEpoch() / t.grad_accumulation);
}

StepMetrics Trainer::RunStep(TrainerCallbacks* callbacks) {
  StepMetrics m = Step(callbacks);
  ReportFp8Scaling(callbacks);
  if (callbacks) callbacks->OnStep(m);
  return m;
}

void Trainer::ReportFp8Scaling(TrainerCallbacks* callbacks) {
  nn::Fp8State* fp8 = model_->fp8();
  if (fp8 == nullptr) return;
  if (step_ != 1 && step_ % kFp8RecordInterval != 0 && step_ != total_steps_) return;
  if (callbacks != nullptr) callbacks->OnFp8Scaling(Fp8Record(*fp8, step_));
  // The saturation counts restart at every record step, reported or not, so
  // that the state (and a checkpoint of it) never depends on the callbacks.
  fp8->ResetSaturated();
}

Fp8ScalingRecord Trainer::Fp8Record(const nn::Fp8State& state, int64_t step) {
  const nn::Fp8State* fp8 = &state;
  const std::vector<double> saturated = HostCopy(fp8->saturated).ToDoubles();
  const std::vector<double> scales = HostCopy(fp8->scales).ToDoubles();
  const std::vector<double> max = HostCopy(fp8->scaled_max).ToDoubles();
  const int64_t len = fp8->amax_history.shape()[0], n = fp8->columns();
  // The newest amax is the history's last row after the update; a history
  // of one (current scaling) keeps none, and the scale tells it instead.
  std::vector<double> newest;
  if (len > 1) newest = HostCopy(fp8->amax_history.Rows(len - 1, len)).ToDoubles();
  Fp8ScalingRecord r;
  r.step = step;
  static const char* kRoles[] = {"input", "weight", "grad_output"};
  for (int64_t c = 0; c < n; ++c) {
    Fp8TensorScale t;
    t.layer = fp8->layers[c / 3];
    t.role = kRoles[c % 3];
    t.scale = scales[c];
    t.amax = len > 1 ? newest[c] : (scales[c] != 1.0 ? max[c] / scales[c] : 0.0);
    t.saturated = static_cast<int64_t>(saturated[c]);
    r.tensors.push_back(std::move(t));
  }
  return r;
}

void Trainer::FinishMetrics(std::chrono::steady_clock::time_point start, int64_t epoch,
                            double loss_sum, bool skipped, double grad_norm, StepMetrics* m) const {
  const TrainingSpec& t = config_.training;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m->step = step_;
  m->total_steps = total_steps_;
  m->epoch = epoch;
  m->loss = loss_sum / t.grad_accumulation;
  m->skipped = skipped;
  m->grad_norm = grad_norm;
  m->samples_per_s = seconds > 0 ? t.batch_size * t.grad_accumulation / seconds : 0;
  m->skipped_total = skipped_total_;
  m->tokens_per_s = m->samples_per_s * static_cast<double>(tokens_per_example_);
  m->mfu = peak_flops_ > 0 ? m->samples_per_s * flops_per_example_ / peak_flops_ : 0;
}

void Trainer::PushScalerStateToDevice() {
  if (device_backend_ == nullptr) return;
  device_backend_->Fill(amp_.scale, scaler_.scale());  // 1 when loss scaling is off
  device_backend_->Fill(amp_.growth_tracker, static_cast<double>(scaler_.growth_tracker()));
}

// The batch's features on the device: gathered there from the resident
// training set (the same rows, bit for bit), or else uploaded.
Tensor Trainer::UploadBatch(const data::Batch& batch) {
  if (device_features_.defined())
    return Kernel<EmbeddingKernel>(device_features_.device())(device_features_, batch.rows);
  return ToDevice(batch.features, batch.size, train_->feature_dim);
}

// rows x cols floats copied to the device straight from `values` (no
// intermediate host tensor).
Tensor Trainer::ToDevice(const std::vector<float>& values, int64_t rows, int64_t cols) {
  auto view = std::make_shared<TensorImpl>();
  view->shape = {rows, cols};
  view->dtype = DType::kF32;
  view->numel = rows * cols;
  // Borrowed for the duration of CopyInto only: no ownership.
  view->data = std::shared_ptr<uint8_t[]>(
      reinterpret_cast<uint8_t*>(const_cast<float*>(values.data())), [](uint8_t*) {});
  Tensor x = device_backend_->Allocate(view->shape, DType::kF32, /*zero=*/false);
  device_backend_->CopyInto(x, Tensor(std::move(view)));
  return x;
}

void Trainer::EnsureDeviceBuckets() {
  if (!device_buckets_.empty()) return;
  device_buckets_ = dist::AssignBuckets(IndexParameters());
  device_bucket_of_.assign(model_->parameters().size(), 0);
  for (size_t b = 0; b < device_buckets_.size(); ++b) {
    for (int i : device_buckets_[b]) device_bucket_of_[i] = static_cast<int>(b);
  }
}

// DDP on a device: the buckets (reverse parameter order, 25 MB, as on the
// CPU) are all-reduced in place, where the gradients are, each as soon as
// the backward has queued the last kernel that writes its gradients. NCCL's
// stream first waits for a marker of the backend's stream at that point, so
// the collective starts on the device once those kernels have run, while
// the host goes on queuing the rest of the backward. Every rank launches the
// same buckets in the same order: the backward's order is the model's.
absl::Status Trainer::BackwardOverlappingAllReduce(const Tensor& scaled) {
  EnsureDeviceBuckets();
  dist::ProcessGroup* group = config_.process_group;
  Backend& be = *device_backend_;
  std::vector<nn::Parameter>& params = model_->parameters();
  device_ready_.assign(params.size(), 0);
  device_remaining_.clear();
  for (const std::vector<int>& b : device_buckets_) {
    device_remaining_.push_back(static_cast<int>(b.size()));
  }
  device_launched_ = 0;
  absl::Status status;
  auto launch = [&](int b) {
    if (!status.ok()) return;
    std::vector<dist::ProcessGroup::DeviceBuffer> buffers;
    for (int i : device_buckets_[b]) {
      const Tensor& g = params[i].value.grad();
      if (!g.defined()) continue;  // not reached by the loss, on every rank alike
      if (g.dtype() != DType::kF32) {
        status = absl::FailedPreconditionError(
            absl::StrCat("data-parallel on a GPU reduces f32 gradients; ", config_.precision.name,
                         " keeps ", std::string(DTypeName(g.dtype())), " gradients"));
        return;
      }
      buffers.push_back({static_cast<float*>(g.raw()), g.numel()});
    }
    if (buffers.empty()) return;
    absl::StatusOr<void*> ready = be.MarkStream();
    status = ready.ok() ? group->AllReduceSumAfter(*ready, buffers) : ready.status();
  };
  const int buckets = static_cast<int>(device_buckets_.size());
  Backward(scaled, Tensor(), [&](const Tensor& leaf) {
    auto it = param_index_.find(leaf.impl());
    if (it == param_index_.end() || device_ready_[it->second]) return;
    device_ready_[it->second] = 1;
    --device_remaining_[device_bucket_of_[it->second]];
    while (device_launched_ < buckets && device_remaining_[device_launched_] == 0) {
      launch(device_launched_++);
    }
  });
  // Buckets still waiting for a gradient the loss did not reach.
  while (device_launched_ < buckets) launch(device_launched_++);
  return status;
}

// Then the loss (loss_shared_, cast to f32 on the backend's stream), and the
// backend's stream waits, on the device, for everything NCCL has queued: the
// unscale that follows reads the sums. The host has not waited once.
absl::Status Trainer::FinishOverlappedAllReduce(void** backward_end) {
  dist::ProcessGroup* group = config_.process_group;
  Backend& be = *device_backend_;
  // The backward's end (and the loss's cast): what the loss's all-reduce
  // waits for, and where the exposed share of the all-reduce time starts.
  absl::StatusOr<void*> end = be.MarkStream();
  if (!end.ok()) return end.status();
  *backward_end = *end;
  if (absl::Status s =
          group->AllReduceSumAfter(*end, {{static_cast<float*>(loss_shared_.raw()), int64_t{1}}});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<void*> done = group->RecordDone();
  if (!done.ok()) return done.status();
  return be.WaitForMarker(*done);
}

// Data-parallel on a device with a group that cannot overlap (none today
// but a test's): every rank's gradients, summed in place where they are,
// after the backward, with the host waiting for each collective.
absl::Status Trainer::AverageOnDevice(const std::vector<Tensor>& grads, double* allreduce_s) {
  dist::ProcessGroup* group = config_.process_group;
  Backend& be = *device_backend_;
  // The loss (summed in f64) as f32 for NCCL, cast on the backend's stream;
  // then the host waits for that stream, so the gradients and the loss are
  // final before NCCL's stream reads them.
  loss_shared_ = ops::Cast(loss_sum_.Detach(), DType::kF32);
  (void)be.ReadScalars({loss_shared_});
  const auto start = std::chrono::steady_clock::now();
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    if (g.dtype() != DType::kF32) {
      return absl::FailedPreconditionError(
          absl::StrCat("data-parallel on a GPU reduces f32 gradients; ", config_.precision.name,
                       " keeps ", std::string(DTypeName(g.dtype())), " gradients"));
    }
    if (absl::Status s = group->AllReduceSum(static_cast<float*>(g.raw()), g.numel()); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = group->AllReduceSum(static_cast<float*>(loss_shared_.raw()), 1); !s.ok()) {
    return s;
  }
  *allreduce_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

StepMetrics Trainer::DeviceStep(TrainerCallbacks* callbacks) {
  const auto start = std::chrono::steady_clock::now();
  const TrainingSpec& t = config_.training;
  Backend& be = *device_backend_;
  const bool data_parallel =
      config_.process_group != nullptr && config_.process_group->size() > 1 && dist_status_.ok();
  be.SetMatmulOptions(config_.precision.allow_tf32);
  optimizer_->ZeroGrad();
  be.Fill(loss_sum_, 0.0);
  // NCCL overlaps the last micro-batch's backward (the others only
  // accumulate, as DDP's no_sync).
  const bool overlap = data_parallel && config_.process_group->overlaps_device_work();
  for (int64_t micro = 0; micro < t.grad_accumulation; ++micro) {
    Tensor loss = MicroBatchLoss(micro);
    Kernel<AddInPlaceKernel>(loss_sum_.device())(loss_sum_, loss.Detach(), 1.0);
    // loss * scale with the scale read on the device, never on the host.
    Tensor scaled = MulScalar(loss, 1.0 / t.grad_accumulation);
    if (scaler_.enabled()) scaled = Mul(scaled, amp_.scale);
    if (overlap && micro == t.grad_accumulation - 1) {
      dist_status_ = BackwardOverlappingAllReduce(scaled);
    } else {
      Backward(scaled);
    }
  }

  std::vector<Tensor> grads = optimizer_->CollectGradients();
  double allreduce_s = 0;
  void* backward_end = nullptr;
  if (overlap) {
    // Made even when a bucket failed: the closing read below reads it.
    loss_shared_ = ops::Cast(loss_sum_.Detach(), DType::kF32);
    if (dist_status_.ok()) dist_status_ = FinishOverlappedAllReduce(&backward_end);
  } else if (data_parallel) {
    dist_status_ = AverageOnDevice(grads, &allreduce_s);
  }
  be.CopyInto(scale_used_, amp_.scale);
  be.Fill(amp_.found_inf, 0.0);
  if (data_parallel) {
    be.MultiplyAndCheckOnDevice(grads, 1.0f / static_cast<float>(config_.process_group->size()),
                                amp_.found_inf);
  }
  // With loss scaling off the scale is 1: this is then just the inf/NaN check
  // that keeps a bad step from being applied.
  be.UnscaleAndCheckOnDevice(grads, amp_);
  be.SumOfSquaresOnDevice(grads, sum_sq_);
  // The norm stays on the device: no wait before the update.
  if (t.clip_norm > 0) be.ClipOnDevice(grads, sum_sq_, t.clip_norm, amp_.found_inf);
  StepMetrics m;
  m.lr = ScheduledLearningRate(config_.schedule, config_.optimizer.lr, optimizer_->steps_taken(),
                               total_steps_);
  optimizer_->StepFused(m.lr, amp_.found_inf);
  const GradScalerOptions& so = scaler_.options();
  if (scaler_.enabled() && so.dynamic) {
    ScaleUpdateOptions u;
    u.growth_factor = so.growth_factor;
    u.backoff_factor = so.backoff_factor;
    u.growth_interval = so.growth_interval;
    u.min_scale = so.min_scale.value_or(0);
    u.max_scale = so.max_scale.value_or(0);
    be.UpdateScaleOnDevice(amp_, u);
  }
  if (nn::Fp8State* fp8 = model_->fp8()) fp8->Update();  // on the device, no host read
  ++step_;
  const int64_t epoch = Epoch();
  if (step_ < total_steps_ && classifier_ != nullptr) {
    position_before_next_ = batcher_.position();
    NextShard(&next_batch_);
    next_x_ = UploadBatch(next_batch_);
    has_next_ = true;
  }
  // The one host wait of the step (with the ranks' summed loss when
  // data-parallel).
  std::vector<Tensor> read = {loss_sum_,  amp_.found_inf,      scale_used_,
                              amp_.scale, amp_.growth_tracker, sum_sq_};
  if (data_parallel) read.push_back(loss_shared_);
  const std::vector<double> v = be.ReadScalars(read);
  const bool skip = v[1] != 0;
  if (scaler_.enabled()) scaler_.LoadState({v[3], static_cast<int64_t>(v[4])});
  m.loss_scale = scaler_.enabled() ? v[2] : 1.0;
  if (skip) {
    optimizer_->UndoSkippedStep();
    ++skipped_total_;
    // Which parameter: read back only on this (rare) path.
    SkipEvent event{step_, "non-finite gradient",
                    FirstNonFinite(grads, optimizer_->ParameterNames()), m.loss_scale,
                    scaler_.enabled() ? v[3] : 1.0};
    if (callbacks) callbacks->OnSkip(event);
  }
  if (data_parallel && dist_status_.ok() && !model_->buffers().empty()) {
    // Batch norm's running statistics: rank 0's, as DDP's broadcast_buffers
    // (the read above waited for the forward that updated them).
    for (const Parameter& b : model_->buffers()) {
      dist_status_ = config_.process_group->Broadcast(static_cast<float*>(b.value.raw()),
                                                      b.value.numel(), /*root=*/0);
      if (!dist_status_.ok()) break;
    }
  }
  const double loss_sum = data_parallel && dist_status_.ok()
                              ? v[6] / static_cast<double>(config_.process_group->size())
                              : v[0];
  FinishMetrics(start, epoch, loss_sum, skip, std::sqrt(v[5]), &m);
  if (overlap && dist_status_.ok()) {
    // The read above waited for the backend's stream, which waited for
    // NCCL's: every timed event is reached.
    double tail_s = 0;
    dist_status_ = config_.process_group->TakeTimes(backward_end, &allreduce_s, &tail_s);
    m.allreduce_s = allreduce_s;
    m.allreduce_hidden = allreduce_s > 0 ? std::clamp(1.0 - tail_s / allreduce_s, 0.0, 1.0) : 0;
  } else if (data_parallel) {
    m.allreduce_s = allreduce_s;  // the blocking path: none of it hidden
  }
  return m;
}

StepMetrics Trainer::Step(TrainerCallbacks* callbacks) {
  if (device_backend_ != nullptr) return DeviceStep(callbacks);
  const auto start = std::chrono::steady_clock::now();
  const TrainingSpec& t = config_.training;
  optimizer_->ZeroGrad();
  double loss_sum = 0;
  const bool data_parallel =
      config_.process_group != nullptr && config_.process_group->size() > 1 && dist_status_.ok();
  for (int64_t micro = 0; micro < t.grad_accumulation; ++micro) {
    Tensor loss = MicroBatchLoss(micro);
    loss_sum += loss.Item();
    Tensor scaled = scaler_.Scale(MulScalar(loss, 1.0 / t.grad_accumulation));
    // Data-parallel: only the last micro-batch's gradients are reduced (as
    // DDP's no_sync for the others), overlapping its backward.
    if (data_parallel && micro + 1 == t.grad_accumulation) {
      BackwardWithAllReduce(scaled);
    } else {
      Backward(scaled);
    }
  }

  std::vector<Tensor> grads = optimizer_->CollectGradients();
  std::vector<double> worker_rates;
  if (data_parallel) {
    // Before the unscale, as DDP reduces during the backward: every rank
    // then checks, clips and applies the same averaged gradients.
    const double compute_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    dist_status_ = FinishAverage(grads, compute_s, &loss_sum, &worker_rates);
  }
  const bool finite = scaler_.Unscale(grads, optimizer_->ParameterNames());
  Backend& be = BackendOf(grads.front());
  const double grad_norm = std::sqrt(be.SumOfSquares(grads));
  bool skip = !finite;
  if (!scaler_.enabled() && !std::isfinite(grad_norm)) skip = true;  // never apply inf/NaN
  if (!skip && t.clip_norm > 0 && grad_norm > t.clip_norm) {
    const float factor = static_cast<float>(t.clip_norm / (grad_norm + 1e-6));
    be.UnscaleAndCheck(grads, factor);
  }
  StepMetrics m;
  // The schedule advances with applied steps only: a skipped step does not
  // consume learning rate.
  m.lr = ScheduledLearningRate(config_.schedule, config_.optimizer.lr, optimizer_->steps_taken(),
                               total_steps_);
  m.loss_scale = scaler_.scale();
  if (!skip) optimizer_->Step(m.lr);
  // Every FP8 history and scale, together, once per step (skipped or not,
  // as Transformer Engine): the next step casts with these scales.
  if (nn::Fp8State* fp8 = model_->fp8()) fp8->Update();
  ++step_;
  std::optional<SkipEvent> event = scaler_.Update(step_);
  if (skip && !event) {
    // No scaler to name the parameter: find it here (a rare path).
    event =
        SkipEvent{step_, "non-finite gradient", FirstNonFinite(grads, optimizer_->ParameterNames()),
                  m.loss_scale, m.loss_scale};
  }
  if (event) {
    ++skipped_total_;
    last_skip_ = *event;
    if (callbacks) callbacks->OnSkip(*event);
  }
  if (data_parallel && dist_status_.ok() && !model_->buffers().empty()) {
    dist_status_ = BroadcastBuffers();
  }
  FinishMetrics(start, Epoch(), loss_sum, skip, grad_norm, &m);
  if (data_parallel && reducer_ != nullptr) {
    m.worker_samples_per_s = std::move(worker_rates);
    m.allreduce_s = reducer_->allreduce_seconds();
    if (m.allreduce_s > 0) {
      m.allreduce_hidden = std::max(0.0, 1.0 - reducer_->exposed_seconds() / m.allreduce_s);
    }
  }
  return m;
}

std::vector<int64_t> Trainer::IndexParameters() {
  std::vector<nn::Parameter>& params = model_->parameters();
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params.size(); ++i) {
    numels.push_back(params[i].value.numel());
    param_index_[params[i].value.impl()] = static_cast<int>(i);
  }
  return numels;
}

void Trainer::EnsureBuckets() {
  if (buckets_ != nullptr) return;
  std::vector<int64_t> numels = IndexParameters();
  // Sum only: 1 / size is folded into the copy back (exact for a
  // power-of-two world, as DDP's predivide would be).
  buckets_ =
      std::make_unique<dist::GradientBuckets>(config_.process_group, std::move(numels),
                                              dist::kDefaultBucketBytes, dist::Averaging::kSumOnly);
  reducer_ = std::make_unique<dist::OverlappedReducer>(buckets_.get());
}

void Trainer::BackwardWithAllReduce(const Tensor& scaled) {
  EnsureBuckets();
  reducer_->BeginStep();
  Backward(scaled, Tensor(), [&](const Tensor& leaf) {
    auto it = param_index_.find(leaf.impl());
    if (it == param_index_.end()) return;
    const int i = it->second;
    const Tensor& g = leaf.grad();
    if (g.dtype() == DType::kF32) {
      std::memcpy(buckets_->grad(i), g.data<float>(), g.numel() * sizeof(float));
    } else {  // low-precision parameters (O2, *-true): widened, exactly
      const std::vector<float> v = g.ToFloats();
      std::memcpy(buckets_->grad(i), v.data(), v.size() * sizeof(float));
    }
    reducer_->TensorReady(i);
  });
}

absl::Status Trainer::BroadcastBuffers() {
  // One message for all of them (batch norm's running statistics, f32 on the
  // CPU): rank 0's replace every other rank's.
  std::vector<float> flat;
  for (const nn::Parameter& b : model_->buffers()) {
    const std::vector<float> v = b.value.ToFloats();
    flat.insert(flat.end(), v.begin(), v.end());
  }
  if (absl::Status s = config_.process_group->Broadcast(
          flat.data(), static_cast<int64_t>(flat.size()), /*root=*/0);
      !s.ok()) {
    return s;
  }
  size_t offset = 0;
  for (nn::Parameter& b : model_->buffers()) {
    const int64_t n = b.value.numel();
    std::memcpy(b.value.data<float>(), flat.data() + offset, n * sizeof(float));
    offset += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status Trainer::FinishAverage(const std::vector<Tensor>& grads, double compute_seconds,
                                    double* loss_sum, std::vector<double>* rates) {
  dist::ProcessGroup* group = config_.process_group;
  if (absl::Status s = reducer_->Finish(); !s.ok()) return s;
  const float inv = 1.0f / static_cast<float>(group->size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    const float* sum = buckets_->grad(static_cast<int>(i));
    if (g.dtype() == DType::kF32) {
      float* out = g.data<float>();
      for (int64_t k = 0; k < g.numel(); ++k) out[k] = sum[k] * inv;
    } else {
      std::vector<float> v(sum, sum + g.numel());
      for (float& x : v) x *= inv;
      g.CopyFrom(Tensor::FromVector(v, g.shape(), DType::kF32));
    }
  }
  // [loss, seconds of rank 0, ..., seconds of rank N-1]: each rank fills its
  // own slot, so the sum gathers them all.
  std::vector<float> shared(1 + group->size(), 0.0f);
  shared[0] = static_cast<float>(*loss_sum);
  shared[1 + group->rank()] = static_cast<float>(compute_seconds);
  if (absl::Status s = group->AllReduceSum(shared.data(), static_cast<int64_t>(shared.size()));
      !s.ok()) {
    return s;
  }
  *loss_sum = static_cast<double>(shared[0]) / group->size();
  const TrainingSpec& t = config_.training;
  const double share = static_cast<double>(t.batch_size / group->size() * t.grad_accumulation);
  rates->clear();
  for (int r = 0; r < group->size(); ++r) {
    const double seconds = shared[1 + r];
    rates->push_back(seconds > 0 ? share / seconds : 0);
  }
  return absl::OkStatus();
}

namespace {

// Rank `rank`'s contiguous share of a global batch (size divisible by `size`).
void TakeShard(int rank, int size, int64_t feature_dim, data::Batch* b) {
  const int64_t per = b->size / size, begin = rank * per;
  if (!b->features.empty()) {  // a device's resident set gathers by rows instead
    b->features = std::vector<float>(b->features.begin() + begin * feature_dim,
                                     b->features.begin() + (begin + per) * feature_dim);
  }
  b->labels = std::vector<int32_t>(b->labels.begin() + begin, b->labels.begin() + begin + per);
  if (!b->rows.empty()) {
    b->rows = std::vector<int32_t>(b->rows.begin() + begin, b->rows.begin() + begin + per);
  }
  b->size = per;
}

// The same for a language model's windows: every rank draws the global
// batch of windows and trains on its contiguous rows.
void TakeTokenShard(int rank, int size, data::TokenBatch* b) {
  const int64_t per = b->batch / size, begin = rank * per * b->block, n = per * b->block;
  b->inputs = std::vector<int32_t>(b->inputs.begin() + begin, b->inputs.begin() + begin + n);
  b->targets = std::vector<int32_t>(b->targets.begin() + begin, b->targets.begin() + begin + n);
  b->batch = per;
}

}  // namespace

void Trainer::NextShard(data::Batch* b) {
  NextBatch(b);
  if (const dist::ProcessGroup* g = config_.process_group; g != nullptr && g->size() > 1) {
    TakeShard(g->rank(), g->size(), train_->feature_dim, b);
  }
}

Tensor Trainer::MicroBatchLoss(int64_t micro) {
  const TrainingSpec& t = config_.training;
  const uint64_t dropout_seed = t.seed + step_ * 7919 + micro;
  // Data-parallel: this rank's `per` samples are rank * per.. of the global
  // batch (TakeShard, TakeTokenShard); their dropout masks are the global
  // batch's there, as one worker's would be.
  const dist::ProcessGroup* g = config_.process_group;
  const bool sharded = g != nullptr && g->size() > 1;
  std::optional<ops::DropoutShardScope> shard;
  auto masks_of_shard = [&](int64_t per) {
    if (sharded) shard.emplace(g->rank() * per, per);
  };
  if (lm_ != nullptr) {
    data::TokenBatch b = windows_->Next(t.batch_size);
    if (sharded) TakeTokenShard(g->rank(), g->size(), &b);
    masks_of_shard(b.batch);
    AutocastScope region(amp::AutocastRegion(config_.precision));
    return lm_->Loss(b.inputs, b.targets, b.batch, b.block, /*training=*/true, dropout_seed);
  }
  Tensor x;
  if (device_backend_ == nullptr) {
    NextShard(&batch_);
    x = Tensor::FromVector(batch_.features, {batch_.size, train_->feature_dim});
  } else if (micro == 0 && has_next_) {
    std::swap(batch_, next_batch_);
    x = next_x_;
    next_x_ = Tensor();
    has_next_ = false;
  } else {
    NextShard(&batch_);
    x = UploadBatch(batch_);
  }
  masks_of_shard(batch_.size);
  AutocastScope region(amp::AutocastRegion(config_.precision));
  Tensor logits = classifier_->Forward(x, /*training=*/true, dropout_seed);
  return SoftmaxCrossEntropy(logits, batch_.labels);
}

void Trainer::NextBatch(data::Batch* batch) {
  batcher_.Next(batch);
  const data::ImageTransforms& t = config_.transforms;
  if ((!t.normalizes() && !t.augments()) || batch->features.empty()) return;
  const int64_t dim = train_->feature_dim;
  for (int64_t i = 0; i < batch->size; ++i) {
    // Seeded by the run's seed, the epoch and the example: the same after a resume.
    data::TransformTrainingExample(t, train_->example_shape, config_.training.seed, batch->epoch,
                                   batch->rows[static_cast<size_t>(i)],
                                   batch->features.data() + i * dim);
  }
}

EvalMetrics Trainer::Evaluate(const data::Dataset& data) {
  if (classifier_ == nullptr) return EvaluateTokens();
  NoGradGuard no_grad;
  AutocastScope region(amp::AutocastRegion(config_.precision));
  if (device_backend_ != nullptr) device_backend_->SetMatmulOptions(config_.precision.allow_tf32);
  const int64_t chunk = 1000;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < data.num_examples; start += chunk) {
    const int64_t n = std::min(chunk, data.num_examples - start);
    std::vector<float> features(data.features.begin() + start * data.feature_dim,
                                data.features.begin() + (start + n) * data.feature_dim);
    if (config_.transforms.normalizes() && data.example_shape.size() == 3) {
      data::NormalizeExamples(config_.transforms, data.example_shape, features.data(), n);
    }
    std::vector<int32_t> labels(data.labels.begin() + start, data.labels.begin() + start + n);
    Tensor logits =
        classifier_->Forward(Tensor::FromVector(features, {n, data.feature_dim}).To(config_.device),
                             /*training=*/false, 0);
    loss_sum += SoftmaxCrossEntropy(logits, labels).Item() * n;
    std::vector<float> l = logits.ToFloats();
    const int64_t c = logits.dim(1);
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < c; ++j) {
        if (l[i * c + j] > l[i * c + best]) best = j;
      }
      correct += best == labels[i];
    }
  }
  EvalMetrics m;
  m.step = step_;
  m.examples = data.num_examples;
  m.loss = data.num_examples ? loss_sum / data.num_examples : 0;
  m.accuracy = data.num_examples ? static_cast<double>(correct) / data.num_examples : 0;
  return m;
}

EvalMetrics Trainer::EvaluateTokens() {
  EvalMetrics m;
  m.step = step_;
  if (lm_ == nullptr) return m;
  NoGradGuard no_grad;
  AutocastScope region(amp::AutocastRegion(config_.precision));
  if (device_backend_ != nullptr) device_backend_->SetMatmulOptions(config_.precision.allow_tf32);
  double nats = 0;  // summed over tokens
  for (const data::TokenBatch& b : eval_batches_) {
    const int64_t n = b.batch * b.block;
    nats += lm_->Loss(b.inputs, b.targets, b.batch, b.block, /*training=*/false, 0).Item() *
            static_cast<double>(n);
    m.tokens += n;
    m.examples += b.batch;
  }
  m.loss = m.tokens ? nats / static_cast<double>(m.tokens) : 0;
  // One token is one byte: nats per byte over ln 2.
  if (tokens_.byte_level) m.bits_per_byte = m.loss / std::log(2.0);
  return m;
}

TrainerState Trainer::SaveState() const {
  TrainerState state;
  state.step = step_;
  state.skipped_total = skipped_total_;
  state.data_position = has_next_ ? position_before_next_ : batcher_.position();
  state.token_windows = windows_ ? windows_->position() : 0;
  state.scaler = scaler_.state();
  state.optimizer_steps = optimizer_->steps_taken();
  for (const Parameter& p : model_->parameters()) {
    state.tensors.emplace_back("param/" + p.name, HostCopy(p.value));
  }
  for (const Parameter& b : model_->buffers()) {
    state.tensors.emplace_back("buffer/" + b.name, HostCopy(b.value));
  }
  for (auto& [name, t] : optimizer_->StateTensors()) state.tensors.emplace_back(name, HostCopy(t));
  if (const nn::Fp8State* fp8 = model_->fp8()) {
    for (auto& [name, t] : fp8->Saved()) state.tensors.emplace_back(name, HostCopy(t));
  }
  return state;
}

absl::Status Trainer::LoadState(const TrainerState& state) {
  if (state.step < 0 || state.step > total_steps_) {
    return absl::InvalidArgumentError(absl::StrCat("trainer state: step ", state.step,
                                                   " is outside this run (0..", total_steps_, ")"));
  }
  // The counters: a state is input (a checkpoint file), so each is checked
  // against the run before anything is restored. Past kMaxCounter a counter
  // is no run's (and one more would overflow).
  constexpr int64_t kMaxCounter = int64_t{1} << 53;
  if (state.skipped_total < 0 || state.skipped_total > state.step) {
    return absl::InvalidArgumentError(absl::StrCat("trainer state: skipped_total ",
                                                   state.skipped_total, " is outside 0..step (",
                                                   state.step, ")"));
  }
  if (state.optimizer_steps < 0 || state.optimizer_steps > state.step) {
    return absl::InvalidArgumentError(absl::StrCat("trainer state: optimizer_steps ",
                                                   state.optimizer_steps, " is outside 0..step (",
                                                   state.step, ")"));
  }
  for (const auto& [field, value] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"data_epoch", state.data_position.epoch},
           {"data_index", state.data_position.index},
           {"data_windows", state.token_windows}}) {
    if (value < 0 || value > kMaxCounter) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer state: ", field, " ", value, " is outside 0..2^53"));
    }
  }
  if (!windows_ && state.token_windows != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer state: data_windows is ", state.token_windows,
                     ", but this run draws no token windows (a language model's state?)"));
  }
  if (scaler_.enabled()) {
    const double scale = state.scaler.scale;
    if (!std::isfinite(scale) || scale <= 0 || scale > std::numeric_limits<float>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer state: loss_scale ", scale, " is not a positive finite f32 value"));
    }
    if (state.scaler.growth_tracker < 0 ||
        state.scaler.growth_tracker > config_.precision.loss_scaling.growth_interval) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer state: growth_tracker ", state.scaler.growth_tracker,
          " is outside 0..growth_interval (", config_.precision.loss_scaling.growth_interval, ")"));
    }
  }
  std::vector<std::pair<std::string, Tensor>> optimizer_tensors;
  std::map<std::string, Tensor> params;
  std::map<std::string, Tensor> fp8_tensors;
  std::map<std::string, Tensor> buffers;
  for (const auto& [name, t] : state.tensors) {
    if (name.rfind("param/", 0) == 0) {
      params[name.substr(6)] = t;
    } else if (name.rfind("buffer/", 0) == 0) {
      buffers[name.substr(7)] = t;
    } else if (name.rfind("fp8/", 0) == 0) {
      fp8_tensors[name] = t;
    } else {
      optimizer_tensors.emplace_back(name, t);
    }
  }
  for (const Parameter& p : model_->parameters()) {
    auto it = params.find(p.name);
    if (it == params.end()) {
      return absl::InvalidArgumentError("trainer state: missing parameter " + p.name);
    }
    if (it->second.shape() != p.value.shape() || it->second.dtype() != p.value.dtype()) {
      return absl::InvalidArgumentError("trainer state: parameter " + p.name +
                                        " has the wrong shape or dtype");
    }
  }
  for (const Parameter& b : model_->buffers()) {
    auto it = buffers.find(b.name);
    if (it == buffers.end()) {
      return absl::InvalidArgumentError("trainer state: missing buffer " + b.name);
    }
    if (it->second.shape() != b.value.shape() || it->second.dtype() != b.value.dtype()) {
      return absl::InvalidArgumentError("trainer state: buffer " + b.name +
                                        " has the wrong shape or dtype");
    }
  }
  // The FP8 scaling state: every history and scale, as saved (a checkpoint
  // of a run without FP8 has none, and one with it must have them all).
  nn::Fp8State* fp8 = model_->fp8();
  if (fp8 == nullptr && !fp8_tensors.empty()) {
    return absl::InvalidArgumentError(
        "trainer state: has FP8 scaling state, but this run's precision has no FP8");
  }
  if (fp8 != nullptr) {
    for (auto& [name, t] : fp8->Saved()) {
      auto it = fp8_tensors.find(name);
      if (it == fp8_tensors.end()) {
        return absl::InvalidArgumentError("trainer state: missing " + name +
                                          " (saved without FP8, or by an older ampd)");
      }
      if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) {
        return absl::InvalidArgumentError("trainer state: " + name +
                                          " has the wrong shape or dtype (another FP8 recipe "
                                          "or model)");
      }
    }
  }
  // Everything checked before anything is copied: a refused state leaves the
  // trainer as it was.
  if (absl::Status s = optimizer_->CheckState(optimizer_tensors, state.optimizer_steps); !s.ok()) {
    return s;
  }
  for (Parameter& p : model_->parameters()) p.value.CopyFrom(params.at(p.name));
  for (Parameter& b : model_->buffers()) b.value.CopyFrom(buffers.at(b.name));
  if (fp8 != nullptr) {
    for (auto& [name, t] : fp8->Saved()) t.CopyFrom(fp8_tensors.at(name));
  }
  if (absl::Status s = optimizer_->LoadState(optimizer_tensors, state.optimizer_steps); !s.ok()) {
    return s;
  }
  scaler_.LoadState(state.scaler);
  PushScalerStateToDevice();
  batcher_.Seek(state.data_position);
  if (windows_) windows_->set_position(state.token_windows);
  has_next_ = false;  // a prefetched batch belongs to the old position
  next_x_ = Tensor();
  step_ = state.step;
  skipped_total_ = state.skipped_total;
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Trainer::Run(TrainerCallbacks* callbacks,
                                         const CancellationToken* cancel) {
  TrainResult result;
  const int64_t per_epoch =
      std::max<int64_t>(1, BatchesPerEpoch() / config_.training.grad_accumulation);
  const int64_t eval_every =
      config_.training.eval_interval > 0 ? config_.training.eval_interval : per_epoch;
  while (step_ < total_steps_) {
    if (cancel && cancel->cancelled()) {
      result.cancelled = true;
      break;
    }
    result.last_step = Step(callbacks);
    if (!dist_status_.ok()) return dist_status_;  // a peer is gone: the job restarts
    ReportFp8Scaling(callbacks);
    if (result.last_step.skipped && !scaler_.enabled() && optimizer_->has_8bit_states()) {
      // Nothing reached the states (the step was not applied), but without a
      // loss scaler nothing will ever make the next step finite either.
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step_, ": non-finite gradient",
          last_skip_.first_parameter.empty() ? "" : " in " + last_skip_.first_parameter,
          " with 8-bit optimizer states and no loss scaling; the job stops here instead of "
          "skipping steps (lower the learning rate, clip gradients, or use a precision with "
          "dynamic loss scaling)"));
    }
    if (device_backend_ != nullptr) {
      if (absl::Status health = device_backend_->Health(); !health.ok()) return health;
    }
    if (std::optional<EvalMetrics> e = EvaluateIfDue(eval_every)) {
      result.final_eval = e;
      if (callbacks) callbacks->OnEval(*e);
    }
    if (callbacks) callbacks->OnStep(result.last_step);
  }
  result.steps_completed = step_;
  result.skipped_steps = skipped_total_;
  return result;
}

std::optional<EvalMetrics> Trainer::EvaluateIfDue(int64_t eval_every) {
  if (step_ % eval_every != 0 && step_ != total_steps_) return std::nullopt;
  if (classifier_ != nullptr && test_ != nullptr) return Evaluate(*test_);
  if (lm_ != nullptr && !eval_batches_.empty()) return EvaluateTokens();
  return std::nullopt;
}

}  // namespace ampd::engine::train
