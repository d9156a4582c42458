#ifndef AMPD_SERVER_JOB_MANAGER_H_
#define AMPD_SERVER_JOB_MANAGER_H_

// Owns every job: its record, its event history, the queue and the workers
// that train it. Training never waits for a subscriber: events are appended to
// the job's history, and each stream reads from the history at its own pace
// (a slow stream is simply behind, never a buffer that fills).
//
// With a store, memory holds what is active: queued and running jobs, and
// ended ones until the store has all of them. Then an ended job lives in the
// store alone; reads of it (GetJob, ListJobs, streams, which replay its
// history in pages) go to the store through a bounded LRU cache
// (EndedJobCache), so memory does not grow with the jobs a server has run.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ampd/v1/training_service.pb.h"
#include "engine/data/dataset.h"
#include "engine/io/checkpoint.h"
#include "engine/runner/job_spec.h"
#include "engine/train/trainer.h"
#include "grpcpp/support/slice.h"
#include "server/agents/agent_registry.h"
#include "server/job_store.h"
#include "server/jobs/ended_job_cache.h"
#include "server/jobs/event_fanout.h"
#include "server/jobs/job_queue.h"
#include "server/jobs/job_runner.h"
#include "server/jobs/persister.h"
#include "server/jobs/wire_log.h"
#include "server/metrics.h"

namespace ampd::server {

struct JobManagerOptions {
  std::string data_root = ".";
  std::string fashion_mnist_dir = engine::data::kFashionMnistDir;
  int max_queued_jobs = 1000;
  int max_queued_jobs_per_principal = 100;
  // Weights + master weights + gradients + optimizer state + activations,
  // as the explain estimate computes them, checked before a job is queued.
  int64_t max_job_memory_bytes = 16LL << 30;
  int64_t max_model_parameters = 500'000'000;
  // Worker slots: jobs trained at once on the CPU, and the ranks a
  // data-parallel job (resources.workers) takes, all together (gang).
  int cpu_workers = 1;
  // The ampd binary whose `worker` mode runs ranks 1..N-1 of a data-parallel
  // job (main.cc: this process's own); empty: such jobs are refused.
  std::string worker_binary;
  // A data-parallel rank silent this long (connecting, or in a collective)
  // is lost: the job restarts (resources.max_restarts).
  int worker_timeout_ms = 30000;
  // Agents lending worker slots (not owned; null: none). A data-parallel
  // job's rank 0 and as many ranks as local slots are free run here, the
  // rest on agents.
  agents::AgentRegistry* agents = nullptr;
  // The address this server's ranks listen on for their peers.
  std::string worker_host = "127.0.0.1";
  // Persistent store (not owned); null keeps everything in memory only.
  JobStore* store = nullptr;
  int persist_interval_ms = 50;
  // Checkpoints under data_root/checkpoints/JOB, whichever comes first; also
  // on cancel and on shutdown. 0 disables that trigger.
  int64_t checkpoint_every_steps = 500;
  int checkpoint_every_seconds = 60;
  int keep_checkpoints = 3;
  // Retention of ended jobs (0: keep): those that ended more than this many
  // days ago, and the oldest beyond this many, are removed with their
  // history, checkpoints, weights and TensorBoard files (ApplyRetention).
  double retain_terminal_jobs_days = 0;
  int max_terminal_jobs = 0;
  // The cache of ended jobs' records and history pages (with a store).
  size_t ended_job_cache_bytes = 16u << 20;
  // CPUs the training workers (and the OpenMP threads they start) run on;
  // empty: wherever the process may run. ampd's --training_cpus.
  std::vector<int> training_cpus;
  // User precision profiles (the PrecisionService's store), by name, as seen
  // by a principal (owner; nullopt: any profile, as an admin sees them).
  std::function<std::optional<ampd::v1::PrecisionConfig>(const std::string& name,
                                                         const std::optional<std::string>& owner)>
      profiles;
  // After each checkpoint a job writes: seconds taken and bytes (metrics).
  std::function<void(double seconds, int64_t bytes)> on_checkpoint;
};

using jobs::EventListener;

class JobManager {
 public:
  explicit JobManager(JobManagerOptions options);
  ~JobManager();

  // Validated by the caller (field violations); re-checked here for limits.
  // Errors: RESOURCE_EXHAUSTED (queue full, model too large),
  // FAILED_PRECONDITION (device unavailable), INVALID_ARGUMENT (request_id
  // reused with a different spec), UNAVAILABLE (shutting down).
  // `owner` is the creating principal; request ids are per owner.
  absl::StatusOr<ampd::v1::Job> Create(const ampd::v1::JobSpec& spec, const std::string& request_id,
                                       const std::string& owner = "", bool admin = true);
  absl::StatusOr<ampd::v1::Job> Get(const std::string& id) const;
  // How a spec of `owner`'s resolves here (data root, profiles they can see).
  engine::runner::JobSpecContext SpecContext(const std::string& owner, bool admin) const;
  const std::string& data_root() const { return options_.data_root; }
  struct Page {
    std::vector<ampd::v1::Job> jobs;
    std::string next_page_token;
  };
  absl::StatusOr<Page> List(const std::vector<ampd::v1::JobState>& states, int page_size,
                            const std::string& page_token,
                            const std::optional<std::string>& owner = std::nullopt) const;
  absl::StatusOr<ampd::v1::Job> Cancel(const std::string& id);
  absl::Status Delete(const std::string& id);
  // Removes the ended jobs the retention options no longer keep (as Delete
  // does: gone for callers at once, then the store, then the files) and logs
  // each; never a queued or running job. Returns how many it removed.
  int ApplyRetention();
  bool RetentionEnabled() const {
    return options_.retain_terminal_jobs_days > 0 || options_.max_terminal_jobs > 0;
  }

  // Streams. The cursor is an index into the job's event history.
  absl::StatusOr<size_t> StartCursor(const std::string& id, int64_t since_step) const;
  // The number of events in the job's history now (0 if it does not exist).
  size_t HistorySize(const std::string& id) const;
  // Events from `cursor` (at most `max`), serialized: each event once, when a
  // stream first needs it, its bytes then shared by every stream. `terminal`
  // when the job has ended and every event has been read; `training` while a
  // worker runs it. NOT_FOUND if the job was deleted.
  absl::Status ReadWire(const std::string& id, size_t cursor, size_t max,
                        std::vector<grpc::Slice>* events, bool* terminal, bool* training);
  // The wire log of a job in memory (queued, running, or ended and not yet
  // all in the store), which a stream then reads with no lock of the
  // manager's; null for a job in the store only (read it with ReadWire).
  std::shared_ptr<const jobs::WireLog> WireLogOf(const std::string& id) const;
  // Events serialized so far, in this process: once each as appended, and
  // each page replayed from the store (tests, benchmarks, metrics).
  static int64_t EventSerializations();
  // Jobs whose records are in memory (queued, running, ended but not yet
  // all in the store), and the ended-job cache (tests, benchmarks).
  size_t JobsInMemory() const;
  const jobs::EndedJobCache& ended_job_cache() const { return ended_cache_; }
  // Position in the queue (0 = next), or -1 when not queued.
  int QueuePosition(const std::string& id) const;
  // What a queued job waits for besides the jobs ahead of it ("2 worker
  // slots (1 free)"); empty when nothing else.
  std::string WaitingFor(const std::string& id) const;
  // Whether an agent a launcher started may join its job (the job's id), or
  // why not: the job takes no such ranks, has ended, or the launcher's world
  // does not match resources.workers.
  absl::StatusOr<std::string> CheckJoin(const ampd::v1::AgentHello& hello) const;
  // The worker slots (--cpu_workers) and how many are free now.
  std::pair<int, int> WorkerSlots() const;
  void Listen(const std::string& id, std::weak_ptr<EventListener> listener);
  // Heartbeats to listeners of queued jobs.
  void SendHeartbeats();
  // Jobs by state, the queue and each running job's latest step (Prometheus).
  JobsSnapshot MetricsSnapshot() const;

  // Stops taking jobs, cancels queued and running ones (reason: shutdown),
  // joins the workers and writes everything to the store. Idempotent.
  void Shutdown();
  bool shutting_down() const;

  // Resolves a job name ("jobs/ID" or "ID") to an id.
  static std::string IdFromName(const std::string& name);

 private:
  static std::string RequestKey(const std::string& owner, const std::string& request_id) {
    return owner + '\x1f' + request_id;
  }

 private:
  struct JobRecord;
  void WorkerLoop();
  // `local`: the local worker slots the job took (rank 0's included);
  // `placement`: those it took on agents (updated when a restart moves ranks).
  void RunJob(const std::shared_ptr<JobRecord>& job, int local, agents::Placement* placement);
  void Transition(JobRecord& job, ampd::v1::JobState state, const std::string& reason);
  void Append(JobRecord& job, ampd::v1::MetricsEvent event);
  // The wire log anew from job.events (at recovery, which may truncate),
  // and the log's state from the job's (after each change).
  void RebuildWire(JobRecord& job);
  void SetWireState(JobRecord& job);
  // A line of the job's own log (a LogRecord event). Under mu_.
  void LogLocked(JobRecord& job, ampd::v1::LogRecord::Severity severity,
                 const std::string& message);
  void Notify(JobRecord& job);
  // Loads jobs from the store; jobs that were running are re-queued.
  void Recover();
  // The persister's hooks: what changed since the last flush (marked as
  // written), and a write that failed (marked unwritten again).
  std::vector<jobs::PendingWrite> CollectChanges();
  void WriteFailed(const jobs::PendingWrite& w);
  // The store has all of an ended job: it leaves memory (for the cache).
  void WriteSucceeded(const jobs::PendingWrite& w);
  // An ended job that lives in the store only: from the cache, else read
  // from the store (and cached). Null: no such job in the store, or one that
  // is still active (its record is in jobs_). Not under mu_.
  absl::StatusOr<std::shared_ptr<const StoredJob>> StoredEnded(const std::string& id) const;
  // StartCursor and ReadWire for such a job. Not under mu_.
  absl::StatusOr<size_t> StoredStartCursor(const StoredJob& job, int64_t since_step) const;
  absl::Status ReadStoredWire(const StoredJob& job, size_t cursor, size_t max,
                              std::vector<grpc::Slice>* events, bool* terminal) const;
  std::shared_ptr<JobRecord> Find(const std::string& id) const;
  // A job's directories under the data root (checkpoints, TensorBoard, weights).
  std::vector<std::string> JobDirs(const std::string& job_id) const;
  void RemoveJobFiles(const std::string& job_id) const;
  // The job's newest usable checkpoint, with the history after its step
  // dropped (all of it past step 0 without one) when anything follows it or
  // `always`: a stream from step 0 then sees every step once. Under mu_.
  struct Rewound {
    std::optional<engine::io::LoadedCheckpoint> checkpoint;
    std::vector<std::string> warnings;
    bool truncated = false;
  };
  Rewound RewindToCheckpoint(JobRecord& record, bool always);
  // FAILED_PRECONDITION when the job's workers could never all be placed.
  // At recovery, a job larger than the local slots waits for agents instead.
  absl::Status CheckSlots(const engine::runner::ResolvedJob& job, bool recovering = false) const;
  int AgentSlots(bool free_only) const;
  // The worker slots a job takes (its resources.workers). Under mu_.
  int SlotsOf(const std::string& id) const;
  // CheckJoin for an active job. Under mu_.
  absl::StatusOr<std::string> CheckJoinLocked(const JobRecord& job,
                                              const ampd::v1::AgentHello& hello) const;
  // INVALID_ARGUMENT (and a log line) when a file path leaves the data root.
  absl::Status CheckConfined(const ampd::v1::JobSpec& spec, const std::string& owner) const;

  JobManagerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::map<std::string, std::shared_ptr<JobRecord>> jobs_;
  std::map<std::string, std::string> request_ids_;  // request_id -> job id
  jobs::JobQueue queue_;
  int64_t next_sequence_ = 1;
  // Also read with no lock (streams, shutting_down()).
  std::atomic<bool> shutting_down_{false};
  std::vector<std::thread> workers_;
  int free_slots_ = 1;                          // worker slots not taken by running jobs
  std::unique_ptr<jobs::Persister> persister_;  // with a store only
  // The streams of each job (see Notify).
  jobs::EventFanout fanout_;
  jobs::DataCache data_cache_;
  // Ended jobs that live in the store only: their cache, their number by
  // state (metrics), and deletions (so that a read racing a delete does not
  // cache the deleted job): a counter bumped before and after each, and the
  // ids being deleted.
  mutable jobs::EndedJobCache ended_cache_;
  std::map<ampd::v1::JobState, int64_t> stored_ended_;
  uint64_t deletions_ = 0;
  std::set<std::string> deleting_;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_JOB_MANAGER_H_
