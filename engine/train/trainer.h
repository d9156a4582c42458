#ifndef AMPD_ENGINE_TRAIN_TRAINER_H_
#define AMPD_ENGINE_TRAIN_TRAINER_H_

// The training loop, readable top to bottom in Trainer::RunStep:
//   zero grads -> for each micro-batch: autocast forward, loss / accum,
//   scaled backward -> gradients to f32 -> unscale + non-finite check ->
//   clip by global norm -> optimizer step unless skipped -> scaler update.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/precision.h"
#include "engine/backend/backend.h"
#include "engine/data/batcher.h"
#include "engine/data/dataset.h"
#include "engine/data/image_transforms.h"
#include "engine/data/token_sequence.h"
#include "engine/data/token_windows.h"
#include "engine/dist/gradient_buckets.h"
#include "engine/dist/overlapped_reducer.h"
#include "engine/dist/process_group.h"
#include "engine/nn/model.h"
#include "engine/optim/optimizer.h"

namespace ampd::engine::train {

struct TrainingSpec {
  int64_t steps = 0;  // optimizer steps; when 0, `epochs` decides
  int64_t epochs = 1;
  int64_t batch_size = 128;  // per micro-batch
  int64_t grad_accumulation = 1;
  int64_t eval_interval = 0;  // steps between evals; 0: once per epoch
  uint64_t seed = 0;
  double clip_norm = 0.0;  // 0: no clipping
};

// On a device, training sets up to this size are copied there once at
// Trainer::Create and batches are gathered on the device; larger ones are
// uploaded batch by batch.
inline constexpr int64_t kDeviceDatasetMaxBytes = int64_t{2} << 30;

struct TrainerConfig {
  nn::ModelSpec model;
  amp::PrecisionConfig precision;
  optim::OptimizerSpec optimizer;
  optim::ScheduleSpec schedule;
  TrainingSpec training;
  // Where the model lives and the step runs; Trainer::Create fails with
  // FAILED_PRECONDITION when the device is not available.
  Device device = Device::kCpu;
  // Training sets up to this many bytes of features stay on the device.
  int64_t device_dataset_max_bytes = kDeviceDatasetMaxBytes;
  // The FLOP/s model FLOPs utilisation is reported against; 0: the device
  // backend's PeakFlops() (the CPU's measured bf16 GEMM rate, a GPU's data
  // sheet). Stays 0 and MFU is not reported when neither knows.
  double peak_flops = 0;
  // Weights to start from (JobSpec.init_from), by parameter name; empty: the
  // model's own initialisation. Each is cast to its parameter's dtype.
  std::map<std::string, Tensor> initial_weights;
  // Data-parallel training (DDP's semantics): this worker's group, which
  // must outlive the trainer; null: one worker. Every worker draws the same
  // global batch of training.batch_size examples (same seed) and computes on
  // its rank's contiguous slice of it; the gradients are averaged in DDP's
  // buckets before the loss-scale unscale, so every rank then sees the same
  // gradients: the same non-finite check, skipped steps, loss scale, global
  // norm for clipping and update. So far: classifiers on the CPU step.
  dist::ProcessGroup* process_group = nullptr;
  // Normalisation (training and evaluation) and seeded augmentation
  // (training) of image examples ([C, H, W]: the data set's example_shape).
  // A data set that is normalised or augmented stays on the host.
  data::ImageTransforms transforms;
};

// A language model's data: the train shards (a window never crosses from one
// into the next) and a held-out sequence for evaluations.
struct TokenData {
  std::vector<const data::TokenSequence*> train;  // must outlive the trainer
  const data::TokenSequence* val = nullptr;       // null: no evaluations
  // Byte-level tokens: evaluations also report bits per byte.
  bool byte_level = false;
  // Windows of block_size + 1 tokens per evaluation, from the start of val;
  // 0: all of it.
  int64_t eval_windows = 0;
};

// Every invalid field, reported as "training.batch_size: must be >= 1, got 0".
absl::Status ValidateTrainerConfig(const TrainerConfig& config);

// FAILED_PRECONDITION ("device: op gelu has no CUDA kernel") when `backend`
// lacks a kernel for an op the job runs: its model's (ModelOps) and the
// training step's own (the loss, loss scaling, gradient accumulation).
absl::Status CheckKernels(const TrainerConfig& config, const backend::Backend& backend);

struct StepMetrics {
  int64_t step = 0;  // 1-based
  int64_t total_steps = 0;
  int64_t epoch = 0;
  double loss = 0;  // unscaled, averaged over micro-batches
  double lr = 0;
  double loss_scale = 1;
  bool skipped = false;
  double grad_norm = 0;
  double samples_per_s = 0;  // examples (a language model's windows) per second
  int64_t skipped_total = 0;
  double tokens_per_s = 0;  // language models: trained tokens per second
  // Model FLOPs per second over the peak (TrainerConfig::peak_flops); 0 when
  // the peak is unknown.
  double mfu = 0;
  // Data-parallel: the step's all-reduce time (on the communication thread)
  // and the share of it that ran while the backward did (0 with one worker).
  double allreduce_s = 0;
  double allreduce_hidden = 0;
  // Data-parallel: each rank's own rate, its share of the batch over the
  // time its forward and backward took (waiting for the slowest excluded),
  // by rank; empty with one worker. A slow worker shows here.
  std::vector<double> worker_samples_per_s;
};

struct EvalMetrics {
  int64_t step = 0;
  double loss = 0;
  double accuracy = 0;   // classifiers
  int64_t examples = 0;  // a language model's: windows
  int64_t tokens = 0;    // language models: tokens scored
  // Byte-level language models: the loss in bits per byte (loss / ln 2).
  double bits_per_byte = 0;
};

// FP8 runs: every FP8 tensor's scale and the amax it came from, after the
// step's update (a periodic record: kFp8RecordInterval).
struct Fp8TensorScale {
  std::string layer;  // "h.0.attn.c_attn"
  std::string role;   // "input", "weight" or "grad_output"
  double scale = 1;
  // This step's amax: the history's newest entry (delayed scaling, whose
  // scale then comes from the whole history by the recipe's
  // amax_compute_algo), or fp8_max / scale (current scaling, which keeps no
  // history; 0 while the scale is still the initial 1).
  double amax = 0;
  // Values its casts clipped to +-fp8_max since the previous record.
  int64_t saturated = 0;
};
struct Fp8ScalingRecord {
  int64_t step = 0;
  std::vector<Fp8TensorScale> tensors;
};
// Steps 1, every this many, and the last have a scaling record.
inline constexpr int64_t kFp8RecordInterval = 100;

class TrainerCallbacks {
 public:
  virtual ~TrainerCallbacks() = default;
  virtual void OnStep(const StepMetrics&) {}
  virtual void OnEval(const EvalMetrics&) {}
  virtual void OnSkip(const amp::SkipEvent&) {}
  // Before the step's OnEval (if any) and OnStep.
  virtual void OnFp8Scaling(const Fp8ScalingRecord&) {}
};

class CancellationToken {
 public:
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::atomic<bool> cancelled_{false};
};

struct TrainResult {
  int64_t steps_completed = 0;
  bool cancelled = false;
  int64_t skipped_steps = 0;
  StepMetrics last_step;
  std::optional<EvalMetrics> final_eval;
};

// Everything needed to continue a run exactly where it stopped: with it, a
// resumed CPU run is bitwise identical to an uninterrupted one (dropout masks
// and batch order are functions of seed, step and epoch).
struct TrainerState {
  int64_t step = 0;
  int64_t skipped_total = 0;
  data::Batcher::Position data_position;
  int64_t token_windows = 0;  // language models: windows drawn so far
  backend::GradScalerState scaler;
  int64_t optimizer_steps = 0;
  // "param/NAME" for the model, plus the optimizer's state tensors.
  std::vector<std::pair<std::string, Tensor>> tensors;
};

class Trainer {
 public:
  // `train` and `test` (may be null) must outlive the trainer.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerConfig& config,
                                                         const data::Dataset* train,
                                                         const data::Dataset* test);
  // A language model (config.model a GPT) on token windows.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerConfig& config,
                                                         const TokenData& tokens);

  // Runs to the end (or until cancelled, checked before every step).
  absl::StatusOr<TrainResult> Run(TrainerCallbacks* callbacks = nullptr,
                                  const CancellationToken* cancel = nullptr);
  // One optimizer step (with its micro-batches); exposed for tests and benches.
  // Calls OnSkip (if skipped) then OnStep. Within Run(), an evaluation due at
  // a step is reported before that step's OnStep, so the step record is the
  // last event of its step (metric streams resume after it without gaps).
  StepMetrics RunStep(TrainerCallbacks* callbacks = nullptr);
  EvalMetrics Evaluate(const data::Dataset& data);
  // A language model's loss on its held-out windows (TokenData::val).
  EvalMetrics EvaluateTokens();

  // A snapshot (copies) of the run's state, and its restoration into a
  // trainer built from the same config. Load checks every name and shape.
  TrainerState SaveState() const;
  absl::Status LoadState(const TrainerState& state);

  const TrainerConfig& config() const { return config_; }
  int64_t total_steps() const { return total_steps_; }
  int64_t steps_done() const { return step_; }
  nn::Model& model() { return *model_; }
  amp::GradScaler& scaler() { return scaler_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  Trainer(const TrainerConfig& config, const data::Dataset* train, const data::Dataset* test,
          std::unique_ptr<nn::Model> model);
  void ComputeTotalSteps();

  // One micro-batch's loss: the next batch drawn, the forward run under
  // autocast. Classifier batches on a device come from the prefetch.
  Tensor MicroBatchLoss(int64_t micro);
  // The batcher's next batch, augmented and normalised (config.transforms).
  void NextBatch(data::Batch* batch);
  int64_t BatchesPerEpoch() const;
  int64_t Epoch() const;
  // The evaluation due after step_ (test set or held-out tokens), if any.
  std::optional<EvalMetrics> EvaluateIfDue(int64_t eval_every);

  StepMetrics Step(TrainerCallbacks* callbacks);
  // Data-parallel: the buckets and the communication thread (made once),
  // the backward of the step's last micro-batch with each gradient handed to
  // its bucket as soon as it is final, then the average: 1 / size folded
  // into the copy back into `grads`, and the loss averaged too.
  void EnsureBuckets();
  void BackwardWithAllReduce(const Tensor& scaled);
  // Fills param_index_; returns the parameters' element counts, in order.
  std::vector<int64_t> IndexParameters();
  // DDP's broadcast_buffers: rank 0's buffers (batch norm's running
  // statistics) to every rank. DDP sends them before each forward; ampd at
  // the end of each step, which gives every forward the same start and every
  // rank the same state between steps (an evaluation or checkpoint anywhere
  // sees rank 0's statistics).
  absl::Status BroadcastBuffers();
  // The next batch, cut to this rank's share when data-parallel.
  void NextShard(data::Batch* b);
  absl::Status AverageOnDevice(const std::vector<Tensor>& grads, double* allreduce_s);
  // Data-parallel on a device over NCCL, overlapping the backward: the last
  // micro-batch's backward launches each bucket's all-reduce on NCCL's
  // stream as soon as its gradients are final (the host never waits), then
  // the loss's; the backend's stream waits for NCCL on the device.
  // *backward_end: a marker of the backend's stream where the backward
  // ended (for the hidden share, TakeTimes).
  void EnsureDeviceBuckets();
  absl::Status BackwardOverlappingAllReduce(const Tensor& scaled);
  absl::Status FinishOverlappedAllReduce(void** backward_end);
  // Also gathers every rank's `compute_seconds` (in the loss's all-reduce,
  // so no extra collective) as per-rank samples/s into `rates`.
  absl::Status FinishAverage(const std::vector<Tensor>& grads, double compute_seconds,
                             double* loss_sum, std::vector<double>* rates);
  // The scaling record when one is due after step_ (one host read of the
  // scales on a device).
  void ReportFp8Scaling(TrainerCallbacks* callbacks);
  // The record of `state` after step `step` (host copies of its tensors).
  static Fp8ScalingRecord Fp8Record(const nn::Fp8State& state, int64_t step);
  // The same step on a device backend: unscale, skip and scale update stay on
  // the device, and the host reads one batch of scalars at the end.
  StepMetrics DeviceStep(TrainerCallbacks* callbacks);
  void PushScalerStateToDevice();
  // The fields both step paths fill the same way, at the end of a step.
  void FinishMetrics(std::chrono::steady_clock::time_point start, int64_t epoch, double loss_sum,
                     bool skipped, double grad_norm, StepMetrics* m) const;
  Tensor UploadBatch(const data::Batch& batch);
  Tensor ToDevice(const std::vector<float>& values, int64_t rows, int64_t cols);

  TrainerConfig config_;
  const data::Dataset* train_;
  const data::Dataset* test_;
  std::unique_ptr<nn::Model> model_;
  nn::Classifier* classifier_ = nullptr;  // exactly one of these two
  nn::LanguageModel* lm_ = nullptr;       // is set (model_'s kind)
  TokenData tokens_;                      // language models
  std::optional<data::TokenWindows> windows_;
  std::vector<data::TokenBatch> eval_batches_;  // TokenData::val's, made once
  int64_t train_tokens_ = 0;
  double flops_per_example_ = 0;
  int64_t tokens_per_example_ = 0;
  double peak_flops_ = 0;
  std::unique_ptr<optim::Optimizer> optimizer_;
  amp::GradScaler scaler_;
  data::Batcher batcher_;
  data::Batch batch_;
  backend::Backend* device_backend_ = nullptr;  // null on the CPU
  backend::DeviceAmpState amp_;                 // device path: scale, growth tracker, found_inf
  Tensor scale_used_, sum_sq_, loss_sum_;
  Tensor loss_shared_;  // data-parallel on a device: the loss all-reduced in f32
  // Device path: the next step's first batch, uploaded before this step's
  // closing read so the copy overlaps the device's work. Checkpoints record
  // the position from before it was taken.
  bool has_next_ = false;
  data::Batch next_batch_;
  Tensor next_x_;
  data::Batcher::Position position_before_next_;
  // Device path: the training set's features, copied to the device once when
  // they fit config.device_dataset_max_bytes; a batch is then a row gather on the
  // device and only its row indices cross the bus.
  Tensor device_features_;
  int64_t total_steps_ = 0;
  int64_t step_ = 0;
  int64_t skipped_total_ = 0;
  amp::SkipEvent last_skip_;
  // Data-parallel: the gradient buckets (made at the first step, when the
  // gradients' sizes are known) and the first collective's failure, which
  // ends Run with it.
  std::unique_ptr<dist::GradientBuckets> buckets_;
  std::unique_ptr<dist::OverlappedReducer> reducer_;
  std::map<const TensorImpl*, int> param_index_;  // a parameter's leaf -> its index
  // The device path's buckets (dist::AssignBuckets) and, in a step, how many
  // of each's gradients are still to come and how many buckets are launched.
  std::vector<std::vector<int>> device_buckets_;
  std::vector<int> device_bucket_of_, device_remaining_;
  std::vector<char> device_ready_;
  int device_launched_ = 0;
  absl::Status dist_status_;
};

}  // namespace ampd::engine::train

#endif  // AMPD_ENGINE_TRAIN_TRAINER_H_
