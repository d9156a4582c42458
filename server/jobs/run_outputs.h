#ifndef AMPD_SERVER_JOBS_RUN_OUTPUTS_H_
#define AMPD_SERVER_JOBS_RUN_OUTPUTS_H_

// What a running job writes besides its events: TensorBoard scalars
// (DATA_ROOT/tensorboard/JOB), checkpoints at their cadence (every N steps or
// T seconds, whichever comes first, and on cancel or shutdown;
// DATA_ROOT/checkpoints/JOB) and the final weights
// (DATA_ROOT/jobs/JOB/model.safetensors). The first storage error cancels the
// job (through its token) and is what Finish returns: a job whose outputs
// cannot be written fails instead of training on without them.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/io/tensorboard.h"
#include "engine/train/trainer.h"

namespace ampd::server::jobs {

// Where a job's checkpoints are kept (the job manager reads them at recovery).
std::string CheckpointDir(const std::string& data_root, const std::string& job_id);

struct RunOutputOptions {
  std::string data_root = ".";
  int64_t checkpoint_every_steps = 500;  // 0: no step trigger
  int checkpoint_every_seconds = 60;     // 0: no time trigger
  int keep_checkpoints = 3;
  // Runs before each checkpoint is written: the job manager flushes the
  // stored history, so that a checkpoint never gets ahead of it.
  std::function<void()> before_checkpoint;
  // After each checkpoint: how long it took and the file's size (metrics).
  std::function<void(double seconds, int64_t bytes)> on_checkpoint;
  // The clock of the time trigger (tests replace it).
  std::function<std::chrono::steady_clock::time_point()> now = [] {
    return std::chrono::steady_clock::now();
  };
};

class RunOutputs {
 public:
  // Opens the TensorBoard log; `trainer` and `cancel` must outlive this.
  static absl::StatusOr<std::unique_ptr<RunOutputs>> Open(const std::string& job_id,
                                                          engine::train::Trainer* trainer,
                                                          engine::train::CancellationToken* cancel,
                                                          RunOutputOptions options);

  // After a step's event was recorded: its scalars, and a checkpoint when
  // one is due (never at the last step: Finish writes the weights then).
  void AfterStep(const engine::train::StepMetrics& m);
  void AfterEval(const engine::train::EvalMetrics& e);
  // TensorBoard: fp8/LAYER/ROLE/scale and .../amax.
  void AfterFp8Scaling(const engine::train::Fp8ScalingRecord& r);
  // A checkpoint now, unless no step has run since the last one.
  void Checkpoint();
  // The end of the run: a checkpoint when it was cancelled (it may resume),
  // the log closed, the weights when it completed. The first storage error.
  absl::Status Finish(bool cancelled);

  const absl::Status& error() const { return error_; }
  int checkpoints_written() const { return checkpoints_written_; }
  std::string checkpoint_dir() const;

 private:
  RunOutputs(std::string job_id, engine::train::Trainer* trainer,
             engine::train::CancellationToken* cancel, RunOutputOptions options,
             std::unique_ptr<engine::io::EventFileWriter> tensorboard);
  void Fail(const absl::Status& s);

  const std::string job_id_;
  engine::train::Trainer* const trainer_;
  engine::train::CancellationToken* const cancel_;
  const RunOutputOptions options_;
  std::unique_ptr<engine::io::EventFileWriter> tensorboard_;
  absl::Status error_;
  std::chrono::steady_clock::time_point last_checkpoint_;
  int64_t last_checkpoint_step_ = 0;
  int checkpoints_written_ = 0;
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_RUN_OUTPUTS_H_
