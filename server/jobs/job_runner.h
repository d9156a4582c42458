#ifndef AMPD_SERVER_JOBS_JOB_RUNNER_H_
#define AMPD_SERVER_JOBS_JOB_RUNNER_H_

// Runs one job to its end on the calling thread (a worker's): loads its data,
// builds the trainer (resuming from a checkpoint's state when given), trains
// it with its outputs (run_outputs.h), and reports every metric event in
// order. The job manager keeps the record, the state machine and the
// streams; this is what happens between RUNNING and the end.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ampd/v1/training_service.pb.h"
#include "engine/data/dataset.h"
#include "engine/runner/job_spec.h"
#include "engine/train/trainer.h"
#include "server/jobs/run_outputs.h"
#include "server/jobs/worker_group.h"

namespace ampd::server::jobs {

// A job's data sets. Built-in and synthetic ones are cached across jobs (they
// cannot change); files are read afresh every run. Thread-safe.
class DataCache {
 public:
  struct Sets {
    std::shared_ptr<const engine::data::Dataset> train;
    std::shared_ptr<const engine::data::Dataset> test;  // null without a test set
    // A language model's data (data.tokens); train and test are then null.
    std::shared_ptr<const engine::runner::TokenJobData> tokens;
  };
  absl::StatusOr<Sets> Load(const ampd::v1::DataSpec& data,
                            const engine::runner::JobSpecContext& context,
                            const engine::train::TrainerConfig& config);
  size_t cached() const;
  // Sets kept, least recently used out first: a server runs many jobs over
  // the same few sets, and a set that is evicted is still held by the jobs
  // training on it.
  static constexpr size_t kMaxSets = 8;

 private:
  mutable std::mutex mu_;
  struct Cached {
    Sets sets;
    uint64_t last_used = 0;
  };
  std::map<std::string, Cached> sets_;  // by the spec's serialized bytes
  uint64_t clock_ = 0;
};

struct RunRequest {
  std::string job_id;
  ampd::v1::JobSpec spec;
  engine::runner::ResolvedJob resolved;
  std::optional<engine::train::TrainerState> resume;
  engine::runner::JobSpecContext context;  // data root, built-in data, path resolution
  RunOutputOptions outputs;
  // A data-parallel job (resolved.workers > 1): this thread trains rank 0,
  // and ranks 1..N-1 are `worker_binary worker ...` child processes
  // (local_workers.h) that meet it through DATA_ROOT/jobs/ID/workers/.
  std::string worker_binary;
  std::string owner;  // whose uploads/ the workers' data paths resolve in
  // Connecting, and each collective: a peer silent this long is lost.
  std::chrono::milliseconds worker_timeout{30000};
  // Ranks local_ranks..N-1 run elsewhere (on agents): this starts them, given
  // the spec as the workers must read it (JSON), and returns one group per
  // agent. Null, or local_ranks >= N: every rank is local.
  int local_ranks = 1 << 30;
  std::function<absl::StatusOr<std::vector<std::unique_ptr<WorkerGroup>>>(
      const std::string& spec_json, int64_t resume_step)>
      start_remote;
  // The address this server's ranks listen on for their peers (Gloo): the
  // loopback for local workers; one the agents' machines reach otherwise.
  std::string worker_host = "127.0.0.1";
  // Called with where the workers run once they have started (tests kill
  // one; the manager logs it).
  std::function<void(const std::string& where)> workers_started;
};

struct RunHooks {
  // Re-checks the data paths just before loading (a symlink may have been
  // swapped in since the job was accepted); null: no check.
  std::function<absl::Status()> check_data;
  // The trainer is built: the run's total steps and the optimizer-state bytes
  // it allocated.
  std::function<void(int64_t total_steps, int64_t optimizer_state_bytes)> started;
  // Every step record, evaluation and skipped step, in order.
  std::function<void(ampd::v1::MetricsEvent)> event;
};

struct RunResult {
  enum class Outcome { kSucceeded, kCancelled, kFailed };
  Outcome outcome = Outcome::kFailed;
  std::string reason;  // why it failed
  // A data-parallel job failed because a worker died or stopped answering:
  // it may be restarted from its checkpoint (resources.max_restarts).
  bool worker_lost = false;
};

// Where a data-parallel job's ranks meet: the spec they read, the rendezvous
// directory (Gloo's keys; agents' ranks reach it through AgentService) and the
// local workers' logs.
std::string WorkersDir(const std::string& data_root, const std::string& job_id);

RunResult RunJob(const RunRequest& request, const RunHooks& hooks, DataCache* data,
                 engine::train::CancellationToken* cancel);

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_JOB_RUNNER_H_
