#include "server/jobs/run_outputs.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/io/checkpoint.h"

namespace ampd::server::jobs {

absl::StatusOr<std::unique_ptr<RunOutputs>> RunOutputs::Open(
    const std::string& job_id, engine::train::Trainer* trainer,
    engine::train::CancellationToken* cancel, RunOutputOptions options) {
  absl::StatusOr<std::unique_ptr<engine::io::EventFileWriter>> tensorboard =
      engine::io::EventFileWriter::Open(options.data_root + "/tensorboard/" + job_id);
  if (!tensorboard.ok()) {
    return absl::Status(tensorboard.status().code(), absl::StrCat("cannot write TensorBoard logs: ",
                                                                  tensorboard.status().message()));
  }
  return std::unique_ptr<RunOutputs>(
      new RunOutputs(job_id, trainer, cancel, std::move(options), *std::move(tensorboard)));
}

RunOutputs::RunOutputs(std::string job_id, engine::train::Trainer* trainer,
                       engine::train::CancellationToken* cancel, RunOutputOptions options,
                       std::unique_ptr<engine::io::EventFileWriter> tensorboard)
    : job_id_(std::move(job_id)),
      trainer_(trainer),
      cancel_(cancel),
      options_(std::move(options)),
      tensorboard_(std::move(tensorboard)),
      last_checkpoint_(options_.now()),
      last_checkpoint_step_(trainer->steps_done()) {}

std::string CheckpointDir(const std::string& data_root, const std::string& job_id) {
  return data_root + "/checkpoints/" + job_id;
}

std::string RunOutputs::checkpoint_dir() const {
  return CheckpointDir(options_.data_root, job_id_);
}

void RunOutputs::Fail(const absl::Status& s) {
  if (s.ok() || !error_.ok()) return;
  error_ = s;
  cancel_->Cancel();
}

void RunOutputs::AfterStep(const engine::train::StepMetrics& m) {
  const double now = engine::io::WallTimeSeconds();
  engine::io::EventFileWriter& tb = *tensorboard_;
  absl::Status s = tb.AddScalar("train/loss", m.step, m.loss, now);
  if (s.ok()) s = tb.AddScalar("train/lr", m.step, m.lr, now);
  if (s.ok()) s = tb.AddScalar("train/loss_scale", m.step, m.loss_scale, now);
  if (s.ok()) s = tb.AddScalar("train/grad_norm", m.step, m.grad_norm, now);
  if (s.ok()) s = tb.AddScalar("train/skipped_steps", m.step, m.skipped_total, now);
  if (s.ok()) s = tb.AddScalar("train/samples_per_s", m.step, m.samples_per_s, now);
  if (s.ok() && m.tokens_per_s > 0)
    s = tb.AddScalar("train/tokens_per_s", m.step, m.tokens_per_s, now);
  if (s.ok() && m.mfu > 0) s = tb.AddScalar("train/mfu", m.step, m.mfu, now);
  if (s.ok() && m.allreduce_s > 0) {
    // Data-parallel: what the gradients' all-reduce cost and how much of it
    // the backward hid.
    s = tb.AddScalar("ddp/allreduce_ms", m.step, 1e3 * m.allreduce_s, now);
    if (s.ok()) s = tb.AddScalar("ddp/allreduce_hidden", m.step, m.allreduce_hidden, now);
    for (size_t r = 0; s.ok() && r < m.worker_samples_per_s.size(); ++r) {
      s = tb.AddScalar(absl::StrCat("ddp/worker", r, "_samples_per_s"), m.step,
                       m.worker_samples_per_s[r], now);
    }
  }
  Fail(s);
  const bool by_steps =
      options_.checkpoint_every_steps > 0 && m.step % options_.checkpoint_every_steps == 0;
  const bool by_time =
      options_.checkpoint_every_seconds > 0 &&
      options_.now() - last_checkpoint_ > std::chrono::seconds(options_.checkpoint_every_seconds);
  if ((by_steps || by_time) && m.step < m.total_steps) Checkpoint();
}

void RunOutputs::AfterEval(const engine::train::EvalMetrics& e) {
  const double now = engine::io::WallTimeSeconds();
  // A language model's evaluation has no accuracy; a byte-level one has
  // bits per byte.
  absl::Status s = tensorboard_->AddScalar("eval/loss", e.step, e.loss, now);
  if (s.ok() && e.tokens == 0)
    s = tensorboard_->AddScalar("eval/accuracy", e.step, e.accuracy, now);
  if (s.ok() && e.bits_per_byte > 0) {
    s = tensorboard_->AddScalar("eval/bits_per_byte", e.step, e.bits_per_byte, now);
  }
  Fail(s);
}

void RunOutputs::AfterFp8Scaling(const engine::train::Fp8ScalingRecord& r) {
  const double now = engine::io::WallTimeSeconds();
  absl::Status s = absl::OkStatus();
  for (const engine::train::Fp8TensorScale& t : r.tensors) {
    const std::string tag = "fp8/" + t.layer + "/" + t.role;
    if (s.ok()) s = tensorboard_->AddScalar(tag + "/scale", r.step, t.scale, now);
    if (s.ok()) s = tensorboard_->AddScalar(tag + "/amax", r.step, t.amax, now);
    if (s.ok()) s = tensorboard_->AddScalar(tag + "/saturated", r.step, t.saturated, now);
  }
  Fail(s);
}

void RunOutputs::Checkpoint() {
  if (!error_.ok() || trainer_->steps_done() == last_checkpoint_step_) return;
  if (options_.before_checkpoint) options_.before_checkpoint();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> path = engine::io::WriteCheckpoint(
      checkpoint_dir(), trainer_->SaveState(), options_.keep_checkpoints);
  if (!path.ok()) return Fail(path.status());
  if (options_.on_checkpoint) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(*path, ec);
    options_.on_checkpoint(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        ec ? 0 : static_cast<int64_t>(bytes));
  }
  last_checkpoint_ = options_.now();
  last_checkpoint_step_ = trainer_->steps_done();
  ++checkpoints_written_;
}

absl::Status RunOutputs::Finish(bool cancelled) {
  if (error_.ok() && cancelled) Checkpoint();  // on cancel and on shutdown
  if (error_.ok()) {
    absl::Status s = tensorboard_->Close();
    if (s.ok() && !cancelled) {
      s = engine::io::WriteModelWeights(
          options_.data_root + "/jobs/" + job_id_ + "/model.safetensors", trainer_->SaveState(),
          trainer_->config().model);
    }
    if (!s.ok()) error_ = s;
  }
  return error_;
}

}  // namespace ampd::server::jobs
