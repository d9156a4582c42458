#include "server/job_manager.h"

#include <malloc.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <random>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/backend/backend.h"
#include "engine/core/error_subject.h"
#include "engine/cpu/host_memory.h"
#include "engine/dist/nccl_connector.h"
#include "engine/io/checkpoint.h"
#include "engine/io/sha256.h"
#include "engine/io/tensorboard.h"
#include "engine/nn/model.h"
#include "engine/train/explain.h"
#include "google/protobuf/util/time_util.h"
#include "server/jobs/job_runner.h"
#include "server/log.h"
#include "server/uploads.h"

namespace ampd::server {

namespace v1 = ::ampd::v1;
using google::protobuf::util::TimeUtil;

struct JobManager::JobRecord {
  v1::Job job;
  engine::runner::ResolvedJob resolved;
  int64_t sequence = 0;
  std::vector<v1::MetricsEvent> events;
  // events[i] serialized, once, as it is appended: what every stream sends,
  // read with no lock (a stream keeps it while it runs; see WireLog).
  std::shared_ptr<jobs::WireLog> wire = std::make_shared<jobs::WireLog>();
  engine::train::CancellationToken cancel;
  std::chrono::steady_clock::time_point started;
  // Persistence: events[0, persisted_events) are in the store; `dirty` when
  // the job record or its events changed since the last flush.
  size_t persisted_events = 0;
  bool dirty = true;
  // Set at recovery: the checkpoint the next run continues from.
  std::optional<engine::train::TrainerState> resume;
};

namespace {

// A server limit (RESOURCE_EXHAUSTED, a google.rpc.QuotaFailure for clients)
// or a state precondition, with its subject as the engine's errors carry it.
absl::Status Quota(const std::string& limit, const std::string& description) {
  return engine::core::SubjectError(absl::StatusCode::kResourceExhausted, limit, description);
}
absl::Status Precondition(const std::string& subject, const std::string& description) {
  return engine::core::SubjectError(absl::StatusCode::kFailedPrecondition, subject, description);
}

// Wall-clock time with sub-second precision. protobuf 3.21's
// TimeUtil::GetCurrentTime() has whole-second resolution (nanos always 0),
// which made job timestamps useless for ordering events within a second.
google::protobuf::Timestamp Now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return TimeUtil::NanosecondsToTimestamp(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count());
}

bool IsTerminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

std::string NewJobId() {
  static std::mt19937_64 gen{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  return absl::StrCat("j", absl::Hex(gen() & 0xffffffffffffull, absl::kZeroPad12));
}

std::string FilterSignature(const std::vector<v1::JobState>& states) {
  std::vector<int> s(states.begin(), states.end());
  std::sort(s.begin(), s.end());
  return absl::StrJoin(s, ",");
}

}  // namespace

absl::Status JobManager::CheckConfined(const v1::JobSpec& spec, const std::string& owner) const {
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::weakly_canonical(options_.data_root, ec);
  for (const auto& [field, value] : engine::runner::SpecPaths(spec)) {
    if (value.empty()) continue;
    // Symlinks are followed: a link inside the root that points outside it
    // is refused like "../". An upload path must stay in its owner's uploads.
    const bool upload = value.rfind("uploads/", 0) == 0;
    const std::filesystem::path resolved =
        std::filesystem::weakly_canonical(ResolveDataPath(options_.data_root, owner, value), ec);
    const std::string base =
        (upload ? std::filesystem::weakly_canonical(UploadDir(options_.data_root, owner), ec)
                : root)
            .string() +
        "/";
    const std::string r = resolved.string();
    if (ec || r.compare(0, base.size(), base) != 0) {
      LogWarning("refused a data path outside the data root",
                 {{"field", field}, {"path", value}, {"resolves_to", r}});
      return engine::core::FieldError(
          field, absl::StrCat("\"", value, "\" resolves outside the server's data root"));
    }
  }
  return absl::OkStatus();
}

std::string JobManager::IdFromName(const std::string& name) {
  const std::string prefix = "jobs/";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

JobManager::JobManager(JobManagerOptions options)
    : options_(std::move(options)),
      queue_(jobs::QueueLimits{options_.max_queued_jobs, options_.max_queued_jobs_per_principal}),
      ended_cache_(options_.ended_job_cache_bytes) {
  if (options_.store != nullptr) {
    Recover();
    persister_ = std::make_unique<jobs::Persister>(
        options_.store,
        jobs::PersisterHooks{[this] { return CollectChanges(); },
                             [this](const jobs::PendingWrite& w) { WriteFailed(w); },
                             [this](const jobs::PendingWrite& w) { WriteSucceeded(w); }},
        std::chrono::milliseconds(options_.persist_interval_ms));
  }
  if (RetentionEnabled()) ApplyRetention();
  // What loading left behind (the store's rows, read once) goes back to the
  // system: an idle server's footprint should not depend on its history.
  malloc_trim(0);
  free_slots_ = std::max(1, options_.cpu_workers);
  if (options_.agents) {
    // An agent that connects (or slots given back) may let the head of the
    // queue start. Under mu_, so that a placement check cannot miss it.
    options_.agents->SetOnChange([this] {
      { std::lock_guard<std::mutex> lock(mu_); }
      work_cv_.notify_all();
    });
    options_.agents->SetCheckJoin([this](const v1::AgentHello& hello) { return CheckJoin(hello); });
  }
  for (int i = 0; i < std::max(1, options_.cpu_workers); ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

JobManager::Rewound JobManager::RewindToCheckpoint(JobRecord& record, bool always) {
  const std::string id = record.job.id();
  Rewound out;
  out.checkpoint =
      engine::io::LoadLatestCheckpoint(jobs::CheckpointDir(options_.data_root, id), &out.warnings);
  for (const std::string& w : out.warnings) {
    LogWarning("unusable checkpoint", {{"job", id}, {"detail", w}});
  }
  std::optional<engine::io::LoadedCheckpoint>& checkpoint = out.checkpoint;
  const int64_t resume_step = checkpoint ? checkpoint->state.step : 0;
  size_t keep = 0;
  if (resume_step > 0) {
    for (size_t i = 0; i < record.events.size(); ++i) {
      const v1::MetricsEvent& e = record.events[i];
      if (e.has_step_record() && e.step_record().step() == resume_step) keep = i + 1;
    }
    if (keep == 0) {
      // Checkpoints are written after the history reaches their step, so
      // this means the store lost events: start over rather than leave a gap.
      LogWarning("checkpoint step not in the stored history; restarting the job from step 0",
                 {{"job", id}, {"step", std::to_string(resume_step)}});
      checkpoint.reset();
    }
  }
  if (keep == 0) {
    while (keep < record.events.size() && record.events[keep].step() == 0) ++keep;
  }
  if (keep < record.events.size() || always) {
    record.events.resize(keep);
    RebuildWire(record);
    record.persisted_events = std::min(record.persisted_events, keep);
    if (options_.store != nullptr) options_.store->TruncateEvents(id, keep).IgnoreError();
    record.job.mutable_progress()->set_step(checkpoint ? resume_step : 0);
    if (!checkpoint) {
      record.job.clear_latest_step();
      record.job.clear_latest_eval();
    }
    out.truncated = true;
  }
  return out;
}

void JobManager::Recover() {
  // Only what a restart resumes comes into memory; ended jobs stay in the
  // store (counted, for the metrics) until something reads them.
  absl::StatusOr<std::vector<StoredJob>> stored = options_.store->LoadUnfinishedJobs();
  absl::StatusOr<int64_t> max_sequence = options_.store->MaxSequence();
  absl::StatusOr<std::map<v1::JobState, int64_t>> counts = options_.store->CountByState();
  absl::StatusOr<std::vector<std::string>> stored_ids = options_.store->JobIds();
  for (const absl::Status& s :
       {stored.status(), max_sequence.status(), counts.status(), stored_ids.status()}) {
    if (!s.ok()) {
      LogError("cannot load jobs from the store", {{"error", std::string(s.message())}});
      return;
    }
  }
  engine::runner::JobSpecContext context;
  context.data_root = options_.data_root;
  context.fashion_mnist_dir = options_.fashion_mnist_dir;
  if (options_.profiles) {
    context.profiles = [this](const std::string& name) {
      return options_.profiles(name, std::nullopt);
    };
  }
  std::lock_guard<std::mutex> lock(mu_);
  next_sequence_ = std::max(next_sequence_, *max_sequence + 1);
  int64_t ended = 0;
  for (const auto& [state, n] : *counts) {
    if (IsTerminal(state)) {
      stored_ended_[state] = n;
      ended += n;
    }
  }
  int requeued = 0;
  for (StoredJob& s : *stored) {
    auto record = std::make_shared<JobRecord>();
    record->job = std::move(s.job);
    record->sequence = s.sequence;
    record->events = std::move(s.events);
    for (size_t i = 0; i < record->events.size(); ++i) {
      record->events[i].set_sequence(static_cast<int64_t>(i));
    }
    RebuildWire(*record);
    record->persisted_events = record->events.size();
    record->dirty = false;
    next_sequence_ = std::max(next_sequence_, s.sequence + 1);
    const std::string id = record->job.id();
    jobs_[id] = record;
    if (!record->job.request_id().empty()) {
      request_ids_[RequestKey(record->job.owner(), record->job.request_id())] = id;
    }
    const v1::JobState state = record->job.state();
    absl::StatusOr<engine::runner::ResolvedJob> resolved =
        engine::runner::ResolveJobSpec(record->job.spec(), context);
    if (!resolved.ok()) {
      Transition(*record, v1::FAILED,
                 absl::StrCat("cannot resume after restart: ", resolved.status().message()));
      *record->job.mutable_end_time() = Now();
      continue;
    }
    record->resolved = *std::move(resolved);
    if (absl::Status fits = CheckSlots(record->resolved, /*recovering=*/true); !fits.ok()) {
      Transition(*record, v1::FAILED,
                 absl::StrCat("cannot resume after restart: ", fits.message()));
      *record->job.mutable_end_time() = Now();
      continue;
    }
    if (state == v1::CANCELLING) {
      Transition(*record, v1::CANCELLED, "cancelled by request (completed after a restart)");
      *record->job.mutable_end_time() = Now();
      continue;
    }
    // A job that had started continues from its newest valid checkpoint (or
    // from its start): events after that step are dropped, so a stream from
    // step 0 sees every step exactly once (the re-run reproduces them: CPU
    // training is deterministic).
    Rewound rewound = RewindToCheckpoint(*record, state == v1::RUNNING || state == v1::RESTARTING);
    std::optional<engine::io::LoadedCheckpoint>& checkpoint = rewound.checkpoint;
    const std::vector<std::string>& warnings = rewound.warnings;
    const int64_t resume_step = checkpoint ? checkpoint->state.step : 0;
    if (rewound.truncated) ++requeued;
    for (const std::string& w : warnings) {
      LogLocked(*record, v1::LogRecord::SEVERITY_WARNING, "unusable checkpoint: " + w);
    }
    if (checkpoint) {
      LogInfo(
          "resuming from checkpoint",
          {{"job", id}, {"checkpoint", checkpoint->path}, {"step", std::to_string(resume_step)}});
      record->resume = std::move(checkpoint->state);
    }
    if (state == v1::RUNNING || state == v1::RESTARTING) {
      LogLocked(*record, v1::LogRecord::SEVERITY_WARNING,
                checkpoint ? absl::StrCat("ampd restarted while the job was running; it resumes "
                                          "from its checkpoint of step ",
                                          resume_step)
                           : std::string("ampd restarted while the job was running; no usable "
                                         "checkpoint, so it starts over from step 0"));
    }
    if (state == v1::RUNNING || state == v1::RESTARTING) {
      Transition(*record, v1::QUEUED, "ampd stopped while the job was running; re-queued");
    }
    queue_.Push(id, record->job.owner(), record->job.spec().priority(), record->sequence);
  }
  // Files of jobs the store no longer has (a deletion cut short by a crash).
  const std::set<std::string> known(stored_ids->begin(), stored_ids->end());
  for (const char* kind : {"checkpoints", "tensorboard", "jobs"}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(options_.data_root + "/" + kind, ec)) {
      const std::string id = e.path().filename().string();
      if (known.count(id) == 0 && jobs_.count(id) == 0 && e.is_directory()) {
        LogInfo("removing the files of a deleted job", {{"job", id}, {"dir", e.path().string()}});
        std::filesystem::remove_all(e.path(), ec);
      }
    }
  }
  LogInfo("recovered jobs from the store", {{"jobs", std::to_string(jobs_.size() + ended)},
                                            {"ended", std::to_string(ended)},
                                            {"requeued", std::to_string(requeued)},
                                            {"queued", std::to_string(queue_.size())}});
}

std::vector<jobs::PendingWrite> JobManager::CollectChanges() {
  std::vector<jobs::PendingWrite> pending;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, job] : jobs_) {
    if (!job->dirty) continue;
    jobs::PendingWrite p{id, job->job, job->sequence, job->persisted_events, {}};
    p.events.assign(job->events.begin() + job->persisted_events, job->events.end());
    pending.push_back(std::move(p));
    job->dirty = false;
    job->persisted_events = job->events.size();
  }
  return pending;
}

void JobManager::WriteFailed(const jobs::PendingWrite& w) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(w.id);
  if (it != jobs_.end()) {
    it->second->dirty = true;
    it->second->persisted_events = std::min(it->second->persisted_events, w.first_index);
  }
}

JobManager::~JobManager() {
  if (options_.agents) {
    options_.agents->SetOnChange(nullptr);
    options_.agents->SetCheckJoin(nullptr);
  }
  Shutdown();
}

bool JobManager::shutting_down() const { return shutting_down_.load(); }

std::shared_ptr<JobManager::JobRecord> JobManager::Find(const std::string& id) const {
  auto it = jobs_.find(IdFromName(id));
  return it == jobs_.end() ? nullptr : it->second;
}

engine::runner::JobSpecContext JobManager::SpecContext(const std::string& owner, bool admin) const {
  engine::runner::JobSpecContext context;
  context.data_root = options_.data_root;
  context.fashion_mnist_dir = options_.fashion_mnist_dir;
  if (options_.profiles) {
    const std::optional<std::string> viewer =
        admin ? std::nullopt : std::optional<std::string>(owner);
    context.profiles = [this, viewer](const std::string& name) {
      return options_.profiles(name, viewer);
    };
  }
  return context;
}

int JobManager::AgentSlots(bool free_only) const {
  if (options_.agents == nullptr) return 0;
  return free_only ? options_.agents->FreeSlots() : options_.agents->TotalSlots();
}

absl::Status JobManager::CheckSlots(const engine::runner::ResolvedJob& job, bool recovering) const {
  const int slots = std::max(1, options_.cpu_workers);
  if (job.external_workers) {
    // Rank 0 takes a local slot; the others bring their own (they join).
    if (options_.agents == nullptr) {
      return Precondition("resources.external_workers", "this server takes no joining ranks");
    }
    return absl::OkStatus();
  }
  if (job.device == engine::Device::kCuda && job.workers > 1) {
    // One process per device, all on this server (agents lend CPU slots).
    const int devices = engine::dist::NcclDeviceCount();
    if (job.workers > devices) {
      return Precondition("resources.workers",
                          absl::StrCat("the job asks for ", job.workers,
                                       " CUDA workers, one per device; this server has ",
                                       devices == 0 ? std::string("no CUDA devices NCCL can use")
                                                    : absl::StrCat(devices, " CUDA device(s)")));
    }
    if (job.workers > slots) {
      return Precondition("resources.workers",
                          absl::StrCat("the job asks for ", job.workers,
                                       " CUDA workers, all on this server; it has ", slots,
                                       " worker slots (--cpu_workers), so it could never start"));
    }
  }
  const int agent_slots = AgentSlots(false);
  // After a restart of ampd its agents have yet to connect again: a job that
  // needs them waits for them (its heartbeat says so) rather than failing.
  const bool wait_for_agents = recovering && options_.agents != nullptr;
  if (job.workers > slots + agent_slots && !wait_for_agents) {
    return Precondition(
        "resources.workers",
        absl::StrCat("the job asks for ", job.workers, " data-parallel workers; this server has ",
                     slots, " worker slots (--cpu_workers) and ",
                     agent_slots == 0 ? std::string("no agents")
                                      : absl::StrCat(agent_slots, " on its agents"),
                     ", so it could never start"));
  }
  if (job.workers > 1 && options_.worker_binary.empty()) {
    return Precondition("resources.workers",
                        "this server cannot start worker processes (no worker binary)");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobManager::Create(const v1::JobSpec& spec, const std::string& request_id,
                                           const std::string& owner, bool admin) {
  const engine::runner::JobSpecContext context = SpecContext(owner, admin);
  absl::StatusOr<engine::runner::ResolvedJob> resolved =
      engine::runner::ResolveJobSpec(spec, context);
  if (!resolved.ok()) return resolved.status();
  {
    absl::StatusOr<engine::backend::Backend*> backend =
        engine::backend::BackendFor(resolved->device);
    if (!backend.ok()) return backend.status();
    if (absl::Status s = engine::train::CheckKernels(resolved->config, **backend); !s.ok())
      return s;
  }
  if (absl::Status s = CheckConfined(spec, owner); !s.ok()) return s;
  if (absl::Status s = CheckSlots(*resolved); !s.ok()) return s;
  if (engine::nn::DataDimsKnown(resolved->config.model)) {
    // The weights to start from fit this model (header only; read in full
    // when the job starts).
    engine::runner::JobSpecContext files = context;
    files.resolve_data_path = [this, owner](const std::string& p) {
      return ResolveDataPath(options_.data_root, owner, p);
    };
    if (absl::Status s = engine::runner::CheckInitFrom(spec, files, resolved->config.model);
        !s.ok()) {
      return s;
    }
    const int64_t params = engine::nn::ParameterCount(resolved->config.model);
    if (params > options_.max_model_parameters) {
      return Quota("max_model_parameters",
                   absl::StrCat("the model has ", params, " parameters; this server allows ",
                                options_.max_model_parameters));
    }
    const engine::train::TrainerConfig& c = resolved->config;
    const int64_t bytes =
        engine::train::EstimateMemory(c.model, c.precision, c.optimizer, c.training.batch_size)
            .total_bytes();
    if (bytes > options_.max_job_memory_bytes) {
      return Quota(
          "max_job_memory_bytes",
          absl::StrCat("the job needs about ", bytes,
                       " bytes (weights, optimizer state "
                       "and activations, as ExplainPrecision estimates); this server allows ",
                       options_.max_job_memory_bytes));
    }
  }
  // A retry of a job that has ended is answered from the store (request ids
  // of active jobs are in memory).
  std::optional<v1::Job> ended_same_request;
  if (!request_id.empty() && options_.store != nullptr) {
    absl::StatusOr<std::optional<StoredJob>> found =
        options_.store->FindByRequestId(owner, request_id);
    if (!found.ok()) return found.status();
    if (*found) ended_same_request = std::move((*found)->job);
  }
  const auto same_request = [&spec](const v1::Job& existing) -> absl::StatusOr<v1::Job> {
    if (existing.spec().SerializeAsString() != spec.SerializeAsString()) {
      return engine::core::FieldError(
          "request_id", "already used for a different job spec (job " + existing.id() + ")");
    }
    return existing;
  };
  std::unique_lock<std::mutex> lock(mu_);
  if (shutting_down_) return absl::UnavailableError("ampd is shutting down; not accepting jobs");
  if (!request_id.empty()) {
    auto it = request_ids_.find(RequestKey(owner, request_id));
    if (it != request_ids_.end()) {
      auto existing = jobs_.find(it->second);
      if (existing != jobs_.end()) return same_request(existing->second->job);
    }
    if (ended_same_request && deleting_.count(ended_same_request->id()) == 0) {
      return same_request(*ended_same_request);
    }
  }
  if (absl::Status admit = queue_.CheckAdmission(owner); !admit.ok()) return admit;
  auto record = std::make_shared<JobRecord>();
  const std::string id = NewJobId();
  record->sequence = next_sequence_++;
  record->resolved = *std::move(resolved);
  v1::Job& job = record->job;
  job.set_name("jobs/" + id);
  job.set_id(id);
  *job.mutable_spec() = spec;
  job.set_request_id(request_id);
  job.set_owner(owner);
  job.set_precision(record->resolved.config.precision.name);
  job.set_optimizer(engine::train::DescribeOptimizer(record->resolved.config.model,
                                                     record->resolved.config.optimizer));
  // Known now when the spec gives steps; an epoch count becomes steps once
  // the data is loaded (until then 0: "unknown").
  job.mutable_progress()->set_total_steps(record->resolved.config.training.steps);
  *job.mutable_create_time() = Now();
  jobs_[id] = record;
  if (!request_id.empty()) request_ids_[RequestKey(owner, request_id)] = id;
  queue_.Push(id, owner, spec.priority(), record->sequence);
  Transition(*record, v1::QUEUED, "");
  v1::Job created = job;
  lock.unlock();
  if (options_.store != nullptr) {
    // An acknowledged job is durable: it is in the store before the client
    // hears about it.
    persister_->Flush();
  }
  work_cv_.notify_one();
  return created;
}

JobsSnapshot JobManager::MetricsSnapshot() const {
  JobsSnapshot s;
  for (int st = v1::JobState_MIN; st <= v1::JobState_MAX; ++st) {
    if (v1::JobState_IsValid(st) && st != v1::JOB_STATE_UNSPECIFIED) {
      s.by_state[v1::JobState_Name(static_cast<v1::JobState>(st))] = 0;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.queue_depth = static_cast<int>(queue_.size());
  for (const auto& [state, n] : stored_ended_) s.by_state[v1::JobState_Name(state)] += n;
  s.jobs_in_memory = static_cast<int64_t>(jobs_.size());
  s.ended_job_cache_bytes = static_cast<int64_t>(ended_cache_.bytes());
  for (const auto& [id, record] : jobs_) {
    const v1::Job& j = record->job;
    ++s.by_state[v1::JobState_Name(j.state())];
    if (j.state() != v1::RUNNING) continue;
    RunningJobMetrics r;
    r.id = id;
    r.step = j.progress().step();
    r.skipped_steps = j.progress().skipped_steps();
    if (j.has_latest_step()) {
      const engine::train::TrainingSpec& t = record->resolved.config.training;
      r.samples_per_s = j.latest_step().samples_per_s();
      r.steps_per_s =
          r.samples_per_s / static_cast<double>(std::max<int64_t>(
                                1, t.batch_size * std::max<int64_t>(1, t.grad_accumulation)));
      r.loss_scale = j.latest_step().loss_scale();
      r.tokens_per_s = j.latest_step().tokens_per_s();
      r.mfu = j.latest_step().mfu();
    }
    s.running.push_back(std::move(r));
  }
  return s;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto job = Find(id)) return job->job;
  }
  absl::StatusOr<std::shared_ptr<const StoredJob>> stored = StoredEnded(id);
  if (!stored.ok()) return stored.status();
  if (*stored) return (*stored)->job;
  return absl::NotFoundError("job");
}

absl::StatusOr<JobManager::Page> JobManager::List(const std::vector<v1::JobState>& states,
                                                  int page_size, const std::string& page_token,
                                                  const std::optional<std::string>& owner) const {
  if (page_size < 0) return engine::core::FieldError("page_size", "must be >= 0");
  if (page_size == 0) page_size = 50;
  page_size = std::min(page_size, 1000);
  const std::string signature = FilterSignature(states);
  int64_t before = INT64_MAX;
  if (!page_token.empty()) {
    std::string raw;
    std::vector<std::string> parts;
    if (absl::WebSafeBase64Unescape(page_token, &raw)) parts = absl::StrSplit(raw, '|');
    if (parts.size() != 3 || parts[0] != "v1" || !absl::SimpleAtoi(parts[1], &before)) {
      return engine::core::FieldError("page_token", "not a token this server issued");
    }
    if (parts[2] != signature) {
      return engine::core::FieldError(
          "page_token", "was issued for a different filter; start again without a token");
    }
  }
  const auto wanted = [&](const v1::Job& job, int64_t sequence) {
    return sequence < before && (!owner || job.owner() == *owner) &&
           (states.empty() || std::find(states.begin(), states.end(), job.state()) != states.end());
  };
  std::vector<std::pair<int64_t, v1::Job>> matching;  // sequence, job
  std::set<std::string> in_memory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, job] : jobs_) {
      in_memory.insert(id);
      if (wanted(job->job, job->sequence)) matching.emplace_back(job->sequence, job->job);
    }
  }
  if (options_.store != nullptr) {
    // Ended jobs in the store only. The store's copy of a job still in
    // memory may be behind; memory's wins, so the store is asked for enough
    // rows to fill the page without those.
    JobFilter filter;
    filter.states = states;
    filter.owner = owner;
    filter.before_sequence = before;
    filter.limit = page_size + 1 + static_cast<int>(in_memory.size());
    absl::StatusOr<std::vector<StoredJob>> stored = options_.store->ListJobs(filter);
    if (!stored.ok()) return stored.status();
    for (StoredJob& j : *stored) {
      if (in_memory.count(j.job.id()) == 0) matching.emplace_back(j.sequence, std::move(j.job));
    }
  }
  std::sort(matching.begin(), matching.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  Page page;
  for (size_t i = 0; i < matching.size() && static_cast<int>(i) < page_size; ++i) {
    page.jobs.push_back(std::move(matching[i].second));
  }
  if (static_cast<int>(matching.size()) > page_size) {
    page.next_page_token = absl::WebSafeBase64Escape(
        absl::StrCat("v1|", matching[page_size - 1].first, "|", signature));
  }
  return page;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id) {
  v1::Job snapshot;
  std::shared_ptr<JobRecord> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job = Find(id);
  }
  if (!job) {
    // Active jobs are all in memory: one in the store only has ended.
    absl::StatusOr<std::shared_ptr<const StoredJob>> stored = StoredEnded(id);
    if (!stored.ok()) return stored.status();
    if (!*stored) return absl::NotFoundError("job");
    return Precondition("state", absl::StrCat("job ", (*stored)->job.id(), " has already ended (",
                                              v1::JobState_Name((*stored)->job.state()), ")"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const v1::JobState state = job->job.state();
    if (IsTerminal(state)) {
      return Precondition("state", absl::StrCat("job ", job->job.id(), " has already ended (",
                                                v1::JobState_Name(state), ")"));
    }
    if (state == v1::QUEUED) {
      queue_.Remove(job->job.id());
      Transition(*job, v1::CANCELLED, "cancelled by request");
      *job->job.mutable_end_time() = Now();
    } else if (state == v1::RUNNING || state == v1::RESTARTING) {
      job->cancel.Cancel();
      Transition(*job, v1::CANCELLING, "cancelled by request");
    }
    snapshot = job->job;
  }
  Notify(*job);
  return snapshot;
}

absl::Status JobManager::Delete(const std::string& id) {
  const std::string job_id = JobManager::IdFromName(id);
  std::shared_ptr<const StoredJob> stored;  // when the job is in the store only
  for (bool in_memory = true;; in_memory = false) {
    if (!in_memory) {
      absl::StatusOr<std::shared_ptr<const StoredJob>> s = StoredEnded(job_id);
      if (!s.ok()) return s.status();
      if (!*s) return absl::NotFoundError("job");
      stored = *std::move(s);
    }
    std::lock_guard<std::mutex> lock(mu_);
    // Being deleted already; else it is ours to delete (deleting_ and
    // deletions_ keep a racing read of the store from caching it, see
    // StoredEnded).
    if (deleting_.count(job_id) != 0) return absl::NotFoundError("job");
    if (!in_memory) {
      deleting_.insert(job_id);
      break;
    }
    auto job = Find(job_id);
    if (!job) continue;  // ended, in the store only (an active job is always in memory)
    if (!IsTerminal(job->job.state())) {
      return Precondition("state",
                          absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job->job.state()),
                                       "; only ended jobs can be deleted (cancel it first)"));
    }
    if (!job->job.request_id().empty()) {
      request_ids_.erase(RequestKey(job->job.owner(), job->job.request_id()));
    }
    job->wire->MarkDeleted();
    jobs_.erase(job_id);
    deleting_.insert(job_id);
    break;
  }
  std::vector<std::weak_ptr<EventListener>> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++deletions_;
    ended_cache_.Forget(job_id);
    if (stored) --stored_ended_[stored->job.state()];
    listeners = fanout_.Forget(job_id);
  }
  // Then the stored record, then the files (a crash in between leaves only
  // files, which the next start sweeps away).
  if (options_.store != nullptr) {
    absl::Status s = persister_->DeleteJob(job_id);
    if (!s.ok())
      LogError("cannot delete job from the store", {{"error", std::string(s.message())}});
  }
  RemoveJobFiles(job_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    deleting_.erase(job_id);
    ++deletions_;
  }
  for (auto& w : listeners) {
    if (auto l = w.lock()) l->OnJobEvents();
  }
  return absl::OkStatus();
}

void JobManager::RemoveJobFiles(const std::string& job_id) const {
  std::error_code ec;
  for (const std::string& dir : JobDirs(job_id)) std::filesystem::remove_all(dir, ec);
}

std::vector<std::string> JobManager::JobDirs(const std::string& job_id) const {
  return {jobs::CheckpointDir(options_.data_root, job_id),
          options_.data_root + "/tensorboard/" + job_id, options_.data_root + "/jobs/" + job_id};
}

int JobManager::ApplyRetention() {
  std::vector<std::pair<std::string, std::string>> doomed;  // id, why
  {
    const int64_t now = google::protobuf::util::TimeUtil::TimestampToNanoseconds(Now());
    const double days = options_.retain_terminal_jobs_days;
    const int64_t cutoff = days > 0 ? now - static_cast<int64_t>(days * 86400e9) : INT64_MIN;
    // Ended jobs still in memory, and how many there are in all.
    std::vector<std::pair<int64_t, std::string>> ended;  // end time (ns), id
    std::set<std::string> in_memory;
    int64_t total = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, record] : jobs_) {
        in_memory.insert(id);
        if (!IsTerminal(record->job.state())) continue;
        ended.emplace_back(
            google::protobuf::util::TimeUtil::TimestampToNanoseconds(record->job.end_time()), id);
      }
      total = static_cast<int64_t>(ended.size());
      for (const auto& [state, n] : stored_ended_) total += n;
    }
    const int64_t over = options_.max_terminal_jobs > 0
                             ? std::max<int64_t>(0, total - options_.max_terminal_jobs)
                             : 0;
    if (options_.store != nullptr && (over > 0 || days > 0)) {
      // The oldest of those in the store only: enough of them for both rules
      // (the store's copies of jobs in memory are skipped; memory's win).
      const int64_t limit = over + static_cast<int64_t>(in_memory.size()) + 1000;
      absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> stored =
          options_.store->EndedJobs(over > 0 ? INT64_MAX : cutoff, limit);
      if (!stored.ok()) {
        LogError("retention: cannot list ended jobs",
                 {{"error", std::string(stored.status().message())}});
        return 0;
      }
      for (const auto& [id, end_ns] : *stored) {
        if (in_memory.count(id) == 0) ended.emplace_back(end_ns, id);
      }
    }
    std::sort(ended.begin(), ended.end());  // oldest first
    for (size_t i = 0; i < ended.size(); ++i) {
      const double age_days = static_cast<double>(now - ended[i].first) / 86400e9;
      if (static_cast<int64_t>(i) < over) {
        doomed.emplace_back(ended[i].second,
                            absl::StrCat("more than --max_terminal_jobs=",
                                         options_.max_terminal_jobs, " ended jobs"));
      } else if (days > 0 && age_days > days) {
        doomed.emplace_back(ended[i].second,
                            absl::StrFormat("ended %.2f days ago (--retain_terminal_jobs_days=%g)",
                                            age_days, days));
      }
    }
  }
  int removed = 0;
  for (const auto& [id, why] : doomed) {
    // Delete re-checks the state: a job cannot be running again, but it may
    // have been deleted by its owner meanwhile.
    if (Delete(id).ok()) {
      ++removed;
      LogInfo("retention removed a job, its history and its files", {{"job", id}, {"why", why}});
    }
  }
  return removed;
}

absl::StatusOr<size_t> JobManager::StartCursor(const std::string& id, int64_t since_step) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto job = Find(id);
  if (!job) {
    lock.unlock();
    absl::StatusOr<std::shared_ptr<const StoredJob>> stored = StoredEnded(id);
    if (!stored.ok()) return stored.status();
    if (!*stored) return absl::NotFoundError("job");
    return StoredStartCursor(**stored, since_step);
  }
  if (since_step <= 0) return 0;
  // Everything after the step record of `since_step`: a client that saw that
  // record has seen every event before it (the record is the last event of
  // its step), so it resumes with no gap and no repeat, whatever came next.
  for (size_t i = job->events.size(); i-- > 0;) {
    const v1::MetricsEvent& e = job->events[i];
    if (e.has_step_record() && e.step_record().step() == since_step) return i + 1;
    if (e.step() < since_step) break;
  }
  // No such record (not reached yet, or re-run after a restart): from the
  // first event beyond that step.
  size_t cursor = 0;
  while (cursor < job->events.size() && job->events[cursor].step() <= since_step) ++cursor;
  // The stream always ends with the terminal state, even for a client that
  // has seen every step.
  if (cursor == job->events.size() && IsTerminal(job->job.state()) && cursor > 0) --cursor;
  return cursor;
}

namespace {
std::atomic<int64_t> g_serializations{0};
}  // namespace

int64_t JobManager::EventSerializations() { return g_serializations.load(); }

absl::Status JobManager::ReadWire(const std::string& id, size_t cursor, size_t max,
                                  std::vector<grpc::Slice>* events, bool* terminal,
                                  bool* training) {
  std::shared_ptr<const jobs::WireLog> log = WireLogOf(id);
  if (!log) {
    absl::StatusOr<std::shared_ptr<const StoredJob>> stored = StoredEnded(id);
    if (!stored.ok()) return stored.status();
    if (!*stored) return absl::NotFoundError("job");
    if (training != nullptr) *training = false;
    return ReadStoredWire(**stored, cursor, max, events, terminal);
  }
  const jobs::WireLog::Read r = log->ReadFrom(cursor, max, events);
  if (r.deleted) return absl::NotFoundError("job");
  *terminal = r.ended;
  if (training != nullptr) *training = r.training;
  return absl::OkStatus();
}

std::shared_ptr<const jobs::WireLog> JobManager::WireLogOf(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto job = Find(id);
  return job ? job->wire : nullptr;
}

void JobManager::RebuildWire(JobRecord& job) {
  job.wire = std::make_shared<jobs::WireLog>();
  for (const v1::MetricsEvent& e : job.events) {
    job.wire->Append(grpc::Slice(e.SerializeAsString()));
    ++g_serializations;
  }
  SetWireState(job);
}

void JobManager::SetWireState(JobRecord& job) {
  const v1::JobState s = job.job.state();
  job.wire->SetState(s == v1::RUNNING || s == v1::RESTARTING || s == v1::CANCELLING, IsTerminal(s));
}

int JobManager::QueuePosition(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.Position(IdFromName(id));
}

int JobManager::SlotsOf(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? 1 : std::max(1, it->second->resolved.workers);
}

absl::StatusOr<std::string> JobManager::CheckJoin(const v1::AgentHello& hello) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(IdFromName(hello.job()));
    if (it != jobs_.end()) return CheckJoinLocked(*it->second, hello);
  }
  // Ended jobs live in the store.
  if (absl::StatusOr<v1::Job> ended = Get(hello.job()); ended.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("job: ", ended->name(), " has ended (",
                                                      v1::JobState_Name(ended->state()), ")"));
  }
  return absl::NotFoundError(absl::StrCat("job: no job \"", hello.job(), "\" to join"));
}

absl::StatusOr<std::string> JobManager::CheckJoinLocked(const JobRecord& j,
                                                        const v1::AgentHello& hello) const {
  if (!j.resolved.external_workers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job: ", j.job.name(), " does not take ranks from a launcher (resources.externalWorkers)"));
  }
  const v1::JobState state = j.job.state();
  if (state != v1::QUEUED && state != v1::RUNNING && state != v1::RESTARTING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job: ", j.job.name(), " has ended (", v1::JobState_Name(state), ")"));
  }
  if (hello.world_size() != j.resolved.workers || hello.rank() < 1 ||
      hello.rank() >= j.resolved.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world_size: ", j.job.name(), " has ", j.resolved.workers,
        " workers: rank 0 in ampd and ranks 1..", j.resolved.workers - 1,
        " from the launcher, so the launcher must start ", j.resolved.workers - 1,
        " tasks; this one is task ", hello.rank() - 1, " of ", hello.world_size() - 1));
  }
  return j.job.id();
}

std::pair<int, int> JobManager::WorkerSlots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {std::max(1, options_.cpu_workers), free_slots_};
}

std::string JobManager::WaitingFor(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int position = queue_.Position(IdFromName(id));
  if (position < 0) return "";
  const int need = SlotsOf(IdFromName(id));
  if (auto it = jobs_.find(IdFromName(id));
      it != jobs_.end() && it->second->resolved.external_workers && options_.agents) {
    const int joined = options_.agents->Joined(it->second->job.id());
    if (joined >= need - 1)
      return free_slots_ > 0 || position > 0 ? "" : "a worker slot for rank 0";
    return absl::StrCat(need - 1, " ranks to join from the cluster's launcher (", joined,
                        " joined): ampd agent --join=", it->second->job.name(),
                        " --server=... under srun, mpirun or an indexed Job");
  }
  if (need <= 1 && position > 0) return "";
  const int agent_free = AgentSlots(true), agent_total = AgentSlots(false);
  if (need <= free_slots_ + agent_free && free_slots_ > 0 && position == 0) return "";
  const int total = std::max(1, options_.cpu_workers) + agent_total;
  std::string out = absl::StrCat(need, need == 1 ? " worker slot (" : " worker slots (",
                                 free_slots_ + agent_free, " free of ", total);
  if (agent_total > 0) absl::StrAppend(&out, ", ", agent_total, " of them on agents");
  if (need > total) absl::StrAppend(&out, "; waiting for agents to connect");
  return out + ")";
}

void JobManager::Listen(const std::string& id, std::weak_ptr<EventListener> listener) {
  // Under the manager's lock, so that a job deleted meanwhile gets none. A
  // job in the store only has ended: nothing will happen to it to tell.
  std::lock_guard<std::mutex> lock(mu_);
  auto job = Find(id);
  if (!job) return;
  fanout_.Listen(job->job.id(), std::move(listener));
}

void JobManager::SendHeartbeats() {
  std::vector<std::string> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = queue_.Ids();
  }
  fanout_.Heartbeat(queued);
}

void JobManager::Transition(JobRecord& job, v1::JobState state, const std::string& reason) {
  job.job.set_state(state);
  v1::StateChange* change = job.job.add_transitions();
  change->set_state(state);
  *change->mutable_time() = Now();
  change->set_step(job.job.progress().step());
  change->set_reason(reason);
  if (!reason.empty() && (state == v1::FAILED || state == v1::CANCELLED)) {
    job.job.set_failure_reason(reason);
  }
  v1::MetricsEvent event;
  event.set_step(change->step());
  *event.mutable_state() = *change;
  Append(job, std::move(event));
}

void JobManager::Append(JobRecord& job, v1::MetricsEvent event) {
  event.set_sequence(static_cast<int64_t>(job.events.size()));
  // Serialized here, once, whatever the number of streams (a microsecond on
  // the training thread per event, none per subscriber).
  job.wire->Append(grpc::Slice(event.SerializeAsString()));
  ++g_serializations;
  job.events.push_back(std::move(event));
  SetWireState(job);
  job.dirty = true;
}

void JobManager::LogLocked(JobRecord& job, v1::LogRecord::Severity severity,
                           const std::string& message) {
  v1::MetricsEvent e;
  e.set_step(job.job.progress().step());
  v1::LogRecord* log = e.mutable_log();
  log->set_severity(severity);
  *log->mutable_time() = Now();
  log->set_message(message);
  Append(job, std::move(e));
}

size_t JobManager::HistorySize(const std::string& id) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto job = Find(id)) return job->events.size();
  }
  absl::StatusOr<std::shared_ptr<const StoredJob>> stored = StoredEnded(id);
  return stored.ok() && *stored ? static_cast<size_t>((*stored)->event_count) : 0;
}

size_t JobManager::JobsInMemory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

void JobManager::WriteSucceeded(const jobs::PendingWrite& w) {
  std::vector<std::weak_ptr<EventListener>> listeners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(w.id);
    if (it == jobs_.end()) return;
    JobRecord& r = *it->second;
    // What was written is the ended job's last state, and nothing changed
    // since it was collected: the store has all of it.
    if (!IsTerminal(w.job.state()) || !IsTerminal(r.job.state()) || r.dirty ||
        r.persisted_events != r.events.size()) {
      return;
    }
    auto stored = std::make_shared<StoredJob>();
    stored->job = r.job;  // a copy: the worker that ran it may still read the record
    stored->sequence = r.sequence;
    stored->event_count = static_cast<int64_t>(r.events.size());
    ++stored_ended_[stored->job.state()];
    if (!stored->job.request_id().empty()) {
      request_ids_.erase(RequestKey(stored->job.owner(), stored->job.request_id()));
    }
    // Its streams read the rest from the store; none waits for an event
    // (wake them all the same, in case a notification was still pending).
    listeners = fanout_.Forget(w.id);
    ended_cache_.PutJob(std::move(stored));  // likely read again soon
    jobs_.erase(it);
  }
  for (auto& l : listeners) {
    if (auto listener = l.lock()) listener->OnJobEvents();
  }
}

absl::StatusOr<std::shared_ptr<const StoredJob>> JobManager::StoredEnded(
    const std::string& name) const {
  if (options_.store == nullptr) return nullptr;
  const std::string id = IdFromName(name);
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (deleting_.count(id) != 0 || jobs_.count(id) != 0) return nullptr;
    epoch = deletions_;
  }
  if (std::shared_ptr<const StoredJob> cached = ended_cache_.Job(id)) return cached;
  absl::StatusOr<std::optional<StoredJob>> read = options_.store->GetJob(id);
  if (!read.ok()) return read.status();
  // Not in the store, or its copy there is of a job still in memory.
  if (!*read || !IsTerminal((*read)->job.state())) return nullptr;
  auto job = std::make_shared<const StoredJob>(std::move(**read));
  std::lock_guard<std::mutex> lock(mu_);
  if (deleting_.count(id) != 0) return nullptr;
  if (jobs_.count(id) != 0) return nullptr;  // its copy in memory is the one to read
  if (deletions_ == epoch) ended_cache_.PutJob(job);
  return job;
}

absl::StatusOr<size_t> JobManager::StoredStartCursor(const StoredJob& job,
                                                     int64_t since_step) const {
  // As StartCursor does for a history in memory, by the store's index.
  if (since_step <= 0) return 0;
  const std::string& id = job.job.id();
  absl::StatusOr<std::vector<std::pair<int64_t, v1::MetricsEvent>>> at =
      options_.store->EventsAtStep(id, since_step);
  if (!at.ok()) return at.status();
  for (auto it = at->rbegin(); it != at->rend(); ++it) {
    if (it->second.has_step_record() && it->second.step_record().step() == since_step) {
      return static_cast<size_t>(it->first + 1);
    }
  }
  absl::StatusOr<int64_t> cursor = options_.store->FirstEventAfterStep(id, since_step);
  if (!cursor.ok()) return cursor.status();
  // The stream always ends with the terminal state.
  if (*cursor >= job.event_count && job.event_count > 0) return job.event_count - 1;
  return static_cast<size_t>(*cursor);
}

absl::Status JobManager::ReadStoredWire(const StoredJob& job, size_t cursor, size_t max,
                                        std::vector<grpc::Slice>* events, bool* terminal) const {
  const size_t size = static_cast<size_t>(job.event_count);
  const std::string& id = job.job.id();
  *terminal = cursor >= size;
  if (cursor >= size || max == 0) return absl::OkStatus();
  constexpr int64_t kPage = jobs::EndedJobCache::kPageEvents;
  const int64_t page = static_cast<int64_t>(cursor) / kPage;
  std::shared_ptr<const jobs::EndedJobCache::Page> events_of_page = ended_cache_.GetPage(id, page);
  if (!events_of_page) {
    uint64_t epoch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      epoch = deletions_;
    }
    absl::StatusOr<std::vector<std::string>> read =
        options_.store->ReadEvents(id, page * kPage, kPage);
    if (!read.ok()) return read.status();
    auto loaded = std::make_shared<jobs::EndedJobCache::Page>();
    loaded->reserve(read->size());
    for (size_t i = 0; i < read->size(); ++i) {
      // As stored, unless the event lacks its index (a store written before
      // events carried one): then with it.
      const int64_t index = page * kPage + static_cast<int64_t>(i);
      v1::MetricsEvent e;
      if (!e.ParseFromString((*read)[i])) {
        return absl::DataLossError(absl::StrCat("event ", index, " of job ", id, " is corrupt"));
      }
      if (e.sequence() != index) {
        e.set_sequence(index);
        loaded->emplace_back(e.SerializeAsString());
      } else {
        loaded->emplace_back((*read)[i]);
      }
    }
    events_of_page = loaded;
    std::lock_guard<std::mutex> lock(mu_);
    if (deletions_ == epoch && deleting_.count(id) == 0) ended_cache_.PutPage(id, page, loaded);
  }
  const size_t first = static_cast<size_t>(page * kPage);
  const size_t end = std::min({size, cursor + max, first + events_of_page->size()});
  if (end <= cursor) {
    return absl::DataLossError(absl::StrCat("the stored history of job ", id, " ends at event ",
                                            first + events_of_page->size(), ", not ", size));
  }
  for (size_t i = cursor; i < end; ++i) events->push_back((*events_of_page)[i - first]);
  *terminal = end == size;
  return absl::OkStatus();
}

void JobManager::Notify(JobRecord& job) {
  // The training thread only marks the job; the notifier thread wakes its
  // streams. Fanning out here would make every step pay for every subscriber.
  fanout_.Notify(job.job.id());
}

void JobManager::WorkerLoop() {
  if (!options_.training_cpus.empty()) {
    // Before this thread starts any OpenMP team: its threads inherit the set.
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : options_.training_cpus) CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      LogWarning("cannot pin the training worker", {{"error", std::strerror(errno)}});
    }
  }
  while (true) {
    std::shared_ptr<JobRecord> job;
    int slots = 1;
    agents::Placement placement;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Gang placement: the job at the head of the queue starts when all
      // the worker slots it needs are free, and jobs behind it wait (a
      // stream of one-slot jobs must not starve a data-parallel one).
      // Rank 0 takes a local slot; the other ranks take local slots first,
      // then agents'.
      // A job whose ranks join from a launcher (external_workers) takes
      // one local slot and the slots of the ranks that joined it.
      auto external = [this](const std::string& id) {
        return options_.agents != nullptr && jobs_.at(id)->resolved.external_workers;
      };
      auto waiting_for_joins = [&](const std::string& id) {
        return external(id) && options_.agents->Joined(id) < SlotsOf(id) - 1;
      };
      // The job to start: the head of the queue, unless it waits for its
      // launcher's ranks to join: such a job holds up no one (its ranks may
      // never come), so the first one behind it that is not waiting so.
      std::string next;
      auto fits = [&] {
        if (queue_.empty() || free_slots_ < 1) return false;
        next = queue_.Front();
        if (waiting_for_joins(next)) {
          next.clear();
          for (const std::string& id : queue_.Ids()) {
            if (!waiting_for_joins(id)) {
              next = id;
              break;
            }
          }
          if (next.empty()) return false;
        }
        const int need = SlotsOf(next);
        // A CUDA job's ranks all run here, one per device.
        if (jobs_.at(next)->resolved.device == engine::Device::kCuda) return need <= free_slots_;
        return external(next) || need <= free_slots_ || need <= free_slots_ + AgentSlots(true);
      };
      while (true) {
        work_cv_.wait(lock, [&] { return shutting_down_ || fits(); });
        if (shutting_down_) return;
        const int need = SlotsOf(next);
        std::optional<agents::Placement> p;
        if (external(next)) {
          slots = 1;
          p = options_.agents->TakeJoined(next, need - 1);
        } else {
          slots = std::min(need, free_slots_);
          if (need == slots) break;
          p = options_.agents->Take(need - slots);
        }
        // Taken all or none; an agent may have left since fits() (then wait).
        if (p) {
          placement = *std::move(p);
          break;
        }
        work_cv_.wait_for(lock, std::chrono::milliseconds(200));
      }
      free_slots_ -= slots;
      const std::string id = next;
      queue_.Remove(id);
      job = jobs_.at(id);
      Transition(*job, v1::RUNNING, "");
      *job->job.mutable_start_time() = Now();
      job->started = std::chrono::steady_clock::now();
    }
    Notify(*job);
    RunJob(job, slots, &placement);
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_slots_ += slots;
    }
    // The job's working set, kept mapped while it trained, goes back.
    engine::cpu::ReturnFreeHostMemory();
    if (options_.agents) {
      options_.agents->Release(placement);
      // Ranks that joined for this job leave with it.
      if (job->resolved.external_workers) options_.agents->EndJob(job->job.id());
    }
    work_cv_.notify_all();  // a data-parallel job may fit now
    Notify(*job);
    if (RetentionEnabled()) ApplyRetention();
  }
}

void JobManager::RunJob(const std::shared_ptr<JobRecord>& job, int local,
                        agents::Placement* placement_ptr) {
  agents::Placement& placement = *placement_ptr;
  jobs::RunRequest request;
  jobs::RunHooks hooks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request.job_id = job->job.id();
    request.spec = job->job.spec();
    request.resolved = job->resolved;
    request.resume = std::move(job->resume);
    job->resume.reset();
  }
  const std::string owner = job->job.owner();
  request.context.data_root = options_.data_root;
  request.context.fashion_mnist_dir = options_.fashion_mnist_dir;
  request.context.resolve_data_path = [this, owner](const std::string& p) {
    return ResolveDataPath(options_.data_root, owner, p);
  };
  request.outputs.data_root = options_.data_root;
  request.outputs.checkpoint_every_steps = options_.checkpoint_every_steps;
  request.outputs.checkpoint_every_seconds = options_.checkpoint_every_seconds;
  request.outputs.keep_checkpoints = options_.keep_checkpoints;
  if (persister_) {
    // The stored history must reach the checkpoint's step before the
    // checkpoint exists, or a crash in between would leave a checkpoint a
    // restart cannot line up with the history (it would start over).
    // The step's record was appended before this callback ran.
    request.outputs.before_checkpoint = [this] { persister_->Flush(); };
  }
  request.outputs.on_checkpoint = [this, &job](double seconds, int64_t bytes) {
    if (options_.on_checkpoint) options_.on_checkpoint(seconds, bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      LogLocked(*job, v1::LogRecord::SEVERITY_INFO,
                absl::StrFormat("checkpoint at step %d written: %.1f MiB in %.2f s",
                                job->job.progress().step(), bytes / 1048576.0, seconds));
    }
    Notify(*job);
  };
  request.owner = owner;
  request.worker_binary = options_.worker_binary;
  request.worker_timeout = std::chrono::milliseconds(options_.worker_timeout_ms);
  if (options_.profiles) {
    request.context.profiles = [this, owner](const std::string& name) {
      return options_.profiles(name, owner);
    };
  }
  request.worker_host = options_.worker_host;
  request.local_ranks = local;
  if (!placement.empty()) {
    // On a restart an agent of the placement may be gone: the ranks go to
    // whichever agents have the slots then (or this attempt fails too).
    request.start_remote = [this, &job, &placement, local, owner](const std::string& spec_json,
                                                                  int64_t resume_step) {
      if (!options_.agents->Connected(placement)) {
        int count = 0;
        for (const auto& [agent, n] : placement) count += n;
        options_.agents->Release(placement);
        placement.clear();
        const bool joined = job->resolved.external_workers;
        std::optional<agents::Placement> again =
            joined ? options_.agents->TakeJoined(job->job.id(), count)
                   : options_.agents->Take(count);
        if (!again) {
          return absl::StatusOr<std::vector<std::unique_ptr<jobs::WorkerGroup>>>(
              absl::UnavailableError(
                  joined ? absl::StrCat("a rank that joined from the launcher left, and ranks 1..",
                                        count, " have not all joined again for the restart")
                         : absl::StrCat("an agent left, and no agents have ", count,
                                        " free worker slots for the restart")));
        }
        placement = *std::move(again);
      }
      agents::AgentRegistry::StartRequest r;
      r.job = job->job.id();
      r.owner = owner;
      r.first_rank = local;
      r.world_size = job->resolved.workers;
      r.spec_json = spec_json;
      r.resume_step = resume_step;
      r.timeout_ms = options_.worker_timeout_ms;
      // Agents run on other machines: they fetch the files the spec names
      // (uploads included) unless they hold the same bytes already.
      for (const auto& [field, path] : engine::runner::SpecPaths(job->job.spec())) {
        agents::AgentRegistry::StartRequest::DataFile f;
        f.local_path = ResolveDataPath(options_.data_root, owner, path);
        absl::StatusOr<std::string> sha = engine::io::Sha256FileHex(f.local_path);
        std::error_code ec;
        const auto size = std::filesystem::file_size(f.local_path, ec);
        if (!sha.ok() || ec) {
          return absl::StatusOr<std::vector<std::unique_ptr<jobs::WorkerGroup>>>(
              absl::FailedPreconditionError(
                  absl::StrCat(field, " \"", path, "\" cannot be read for the agents: ",
                               sha.ok() ? ec.message() : sha.status().message())));
        }
        f.file.set_path(path);
        f.file.set_sha256(*sha);
        f.file.set_size_bytes(static_cast<int64_t>(size));
        r.data_files.push_back(std::move(f));
      }
      return options_.agents->Start(placement, r);
    };
  }
  request.workers_started = [this, &job](const std::string& where) {
    std::lock_guard<std::mutex> lock(mu_);
    LogLocked(*job, v1::LogRecord::SEVERITY_INFO,
              absl::StrCat("data-parallel: rank 0 trains in ampd, ranks 1..",
                           job->resolved.workers - 1, " in ", where));
  };
  hooks.check_data = [this, &request, owner] { return CheckConfined(request.spec, owner); };
  hooks.started = [this, &job, &request](int64_t total_steps, int64_t optimizer_state_bytes) {
    const bool resumed = request.resume.has_value();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (job->job.state() == v1::RESTARTING) {
        Transition(*job, v1::RUNNING,
                   absl::StrCat("restarted: all ", job->resolved.workers, " workers are training"));
      }
      job->job.mutable_progress()->set_total_steps(total_steps);
      job->job.set_optimizer_state_bytes(optimizer_state_bytes);
      const engine::train::TrainerConfig& c = job->resolved.config;
      LogLocked(
          *job, v1::LogRecord::SEVERITY_INFO,
          absl::StrFormat("training on %s: %d parameters, %s, %s; optimizer state %.1f MiB; "
                          "%d steps%s",
                          job->resolved.device == engine::Device::kCuda ? "cuda" : "cpu",
                          engine::nn::ParameterCount(c.model), c.precision.name,
                          job->job.optimizer(), optimizer_state_bytes / 1048576.0, total_steps,
                          resumed ? absl::StrCat(" (resuming from the checkpoint of step ",
                                                 job->job.progress().step(), ")")
                                  : std::string()));
    }
    Notify(*job);
  };
  hooks.event = [this, &job](v1::MetricsEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      v1::Job& j = job->job;
      if (e.has_step_record()) {
        *j.mutable_latest_step() = e.step_record();
        v1::Progress* p = j.mutable_progress();
        p->set_step(e.step_record().step());
        p->set_total_steps(e.step_record().total_steps());
        p->set_skipped_steps(e.step_record().skipped_total());
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - job->started).count();
        const int64_t left = p->total_steps() - p->step();
        p->set_eta_seconds(p->step() > 0 ? elapsed / p->step() * left : 0);
      } else if (e.has_eval()) {
        *j.mutable_latest_eval() = e.eval();
      }
      Append(*job, std::move(e));
    }
    Notify(*job);
  };
  jobs::RunResult result;
  for (int restarts = 0;; ++restarts) {
    result = jobs::RunJob(request, hooks, &data_cache_, &job->cancel);
    if (result.outcome != jobs::RunResult::Outcome::kFailed || !result.worker_lost ||
        job->cancel.cancelled() || shutting_down_) {
      break;
    }
    const int max_restarts = job->resolved.max_restarts;
    if (restarts >= max_restarts) {
      result.reason =
          absl::StrCat(result.reason, "; gave up after ", restarts,
                       restarts == 1 ? " restart" : " restarts", " (resources.max_restarts)");
      break;
    }
    // Like a restart of ampd (Recover): every rank resumes from the last
    // checkpoint and the history after it goes, so each step is in it once.
    if (persister_) persister_->Flush();
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Cancelled meanwhile? (RESTARTING: the last restart failed before
      // its workers were all up, e.g. one could not connect.)
      if (job->job.state() != v1::RUNNING && job->job.state() != v1::RESTARTING) break;
      Rewound rewound = RewindToCheckpoint(*job, /*always=*/true);
      const int64_t step = rewound.checkpoint ? rewound.checkpoint->state.step : 0;
      Transition(
          *job, v1::RESTARTING,
          absl::StrCat(result.reason, "; restarting all ", job->resolved.workers, " workers from ",
                       step > 0 ? absl::StrCat("the checkpoint of step ", step)
                                : std::string("step 0 (no checkpoint yet)"),
                       " (restart ", restarts + 1, " of at most ", max_restarts, ")"));
      // emplace, not assignment: GCC 12 -O2 warns (maybe-uninitialized, a
      // false positive) on an optional's move assignment here.
      request.resume.reset();
      if (rewound.checkpoint) request.resume.emplace(std::move(rewound.checkpoint->state));
    }
    Notify(*job);
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (job->resolved.device != engine::Device::kCpu) {
    if (absl::StatusOr<engine::backend::Backend*> be =
            engine::backend::BackendFor(job->resolved.device);
        be.ok()) {
      const engine::backend::DeviceMemoryStats m = (*be)->MemoryStats();
      LogLocked(*job, v1::LogRecord::SEVERITY_INFO,
                absl::StrFormat("device memory: peak %.1f MiB in use, %.1f MiB cached",
                                m.peak_in_use_bytes / 1048576.0, m.cached_bytes / 1048576.0));
    }
  }
  switch (result.outcome) {
    case jobs::RunResult::Outcome::kFailed:
      Transition(*job, v1::FAILED, result.reason);
      break;
    case jobs::RunResult::Outcome::kCancelled:
      if (shutting_down_ && options_.store != nullptr &&
          (job->job.state() == v1::RUNNING || job->job.state() == v1::RESTARTING)) {
        // Not the user's cancel: the job stays in the store and resumes when
        // ampd starts again.
        Transition(*job, v1::QUEUED,
                   "ampd shut down while the job was running; it resumes on restart");
        return;
      }
      Transition(
          *job, v1::CANCELLED,
          shutting_down_ ? "ampd shut down while the job was running" : "cancelled by request");
      break;
    case jobs::RunResult::Outcome::kSucceeded:
      Transition(*job, v1::SUCCEEDED, "");
      break;
  }
  *job->job.mutable_end_time() = Now();
}

void JobManager::Shutdown() {
  std::vector<std::shared_ptr<JobRecord>> touched;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    if (options_.store == nullptr) {
      // Nothing would survive the process: queued jobs end here.
      for (const std::string& id : queue_.Ids()) {
        auto job = jobs_.at(id);
        Transition(*job, v1::CANCELLED, "ampd shut down before the job started");
        *job->job.mutable_end_time() = Now();
      }
    }
    queue_.Clear();
    for (auto& [id, job] : jobs_) {
      if (job->job.state() == v1::RUNNING || job->job.state() == v1::RESTARTING ||
          job->job.state() == v1::CANCELLING) {
        job->cancel.Cancel();
      }
    }
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, job] : jobs_) touched.push_back(job);
  }
  // Every stream re-checks its job: ended ones finish, the rest are told the
  // server is going away.
  for (auto& job : touched) Notify(*job);
  fanout_.Stop();                      // after delivering what is pending
  if (persister_) persister_->Stop();  // and a last flush
}

}  // namespace ampd::server
