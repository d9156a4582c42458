#include "server/jobs/job_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/backend/backend.h"
#include "engine/dist/nccl_connector.h"
#include "engine/dist/process_group.h"
#include "engine/io/atomic_file.h"
#include "engine/nn/model.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "server/jobs/local_workers.h"
#include "server/log.h"

namespace ampd::server::jobs {

std::string WorkersDir(const std::string& data_root, const std::string& job_id) {
  return absl::StrCat(data_root, "/jobs/", job_id, "/workers");
}

namespace {

namespace v1 = ::ampd::v1;

// The trainer's callbacks as metric events; after_step/after_eval run once
// the event is out (the outputs: scalars, checkpoints).
class TrainerEvents : public engine::train::TrainerCallbacks {
 public:
  TrainerEvents(std::function<void(v1::MetricsEvent)> append, int workers)
      : append_(std::move(append)), workers_(workers) {}
  // Called after each step's and eval's event is recorded.
  std::function<void(const engine::train::StepMetrics&)> after_step;
  std::function<void(const engine::train::EvalMetrics&)> after_eval;
  std::function<void(const engine::train::Fp8ScalingRecord&)> after_fp8;
  void OnFp8Scaling(const engine::train::Fp8ScalingRecord& r) override {
    v1::MetricsEvent e;
    e.set_step(r.step);
    auto* f = e.mutable_fp8_scaling();
    f->set_step(r.step);
    for (const engine::train::Fp8TensorScale& t : r.tensors) {
      auto* o = f->add_tensors();
      o->set_layer(t.layer);
      o->set_role(t.role);
      o->set_scale(t.scale);
      o->set_amax(t.amax);
      o->set_saturated(t.saturated);
    }
    append_(std::move(e));
    if (after_fp8) after_fp8(r);
  }
  void OnStep(const engine::train::StepMetrics& m) override {
    Record(m);
    if (after_step) after_step(m);
  }
  void OnEval(const engine::train::EvalMetrics& m) override {
    RecordEval(m);
    if (after_eval) after_eval(m);
  }

 private:
  void Record(const engine::train::StepMetrics& m) {
    v1::MetricsEvent e;
    e.set_step(m.step);
    auto* r = e.mutable_step_record();
    r->set_step(m.step);
    r->set_total_steps(m.total_steps);
    r->set_epoch(m.epoch);
    r->set_loss(m.loss);
    r->set_lr(m.lr);
    r->set_loss_scale(m.loss_scale);
    r->set_skipped(m.skipped);
    r->set_grad_norm(m.grad_norm);
    r->set_samples_per_s(m.samples_per_s);
    r->set_skipped_total(m.skipped_total);
    r->set_tokens_per_s(m.tokens_per_s);
    r->set_mfu(m.mfu);
    if (workers_ > 1) {
      r->set_workers(workers_);
      r->set_allreduce_seconds(m.allreduce_s);
      r->set_allreduce_hidden(m.allreduce_hidden);
      for (double rate : m.worker_samples_per_s) r->add_worker_samples_per_s(rate);
    }
    // Not TimeUtil::GetCurrentTime(): protobuf 3.21's has whole seconds.
    const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
    *r->mutable_time() = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
        std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count());
    append_(std::move(e));
  }
  void RecordEval(const engine::train::EvalMetrics& m) {
    v1::MetricsEvent e;
    e.set_step(m.step);
    auto* r = e.mutable_eval();
    r->set_step(m.step);
    r->set_loss(m.loss);
    r->set_accuracy(m.accuracy);
    r->set_examples(m.examples);
    r->set_tokens(m.tokens);
    r->set_bits_per_byte(m.bits_per_byte);
    append_(std::move(e));
  }

 public:
  void OnSkip(const engine::amp::SkipEvent& s) override {
    v1::MetricsEvent e;
    e.set_step(s.step);
    auto* r = e.mutable_skip();
    r->set_step(s.step);
    r->set_reason(s.reason);
    r->set_parameter(s.first_parameter);
    r->set_scale_before(s.scale_before);
    r->set_scale_after(s.scale_after);
    append_(std::move(e));
  }

 private:
  std::function<void(v1::MetricsEvent)> append_;
  int workers_ = 1;
};

RunResult Failed(std::string reason) { return {RunResult::Outcome::kFailed, std::move(reason)}; }

// Rank 0's side of a data-parallel run: the directory the ranks meet in (the
// spec they read, Gloo's rendezvous keys, each local worker's log), the
// other ranks (local processes, and agents' shares), and rank 0's own
// connection to them.
struct DataParallelRun {
  std::string dir;
  std::vector<std::unique_ptr<WorkerGroup>> workers;
  std::unique_ptr<engine::dist::ProcessGroup> group;

  std::optional<std::string> lost() const {
    for (const auto& w : workers) {
      if (std::optional<std::string> l = w->lost()) return l;
    }
    return std::nullopt;
  }
  void Kill() {
    for (auto& w : workers) w->Kill();
  }
  // Every group's Finish, each within `grace`; the first lost reason.
  std::string Finish(std::chrono::milliseconds grace) {
    std::string first;
    for (auto& w : workers) {
      std::string lost = w->Finish(grace);
      if (first.empty()) first = std::move(lost);
    }
    return first;
  }
};

// The spec as the workers must read it: a user's precision profile by name
// is replaced by its config (a worker has no profile store).
v1::JobSpec SpecForWorkers(const RunRequest& r) {
  v1::JobSpec spec = r.spec;
  if (spec.precision().has_profile() && r.context.profiles) {
    std::vector<engine::runner::FieldViolation> unknown;
    (void)engine::runner::ResolveJobPrecision(spec.precision(), {}, &unknown);
    if (!unknown.empty()) {
      if (std::optional<v1::PrecisionConfig> user =
              r.context.profiles(spec.precision().profile())) {
        *spec.mutable_precision()->mutable_custom() = *user;
      }
    }
  }
  return spec;
}

// The CUDA device of a job's rank on this machine, as its process is to see
// it (CUDA_VISIBLE_DEVICES): the rank-th of the server's own visible devices
// when it was given some, else the rank-th device.
std::string VisibleDeviceOfRank(int rank) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible != '\0') {
    std::vector<std::string> devices = absl::StrSplit(visible, ',');
    if (rank < static_cast<int>(devices.size())) return devices[rank];
  }
  return std::to_string(rank);
}

absl::StatusOr<DataParallelRun> StartDataParallel(const RunRequest& r) {
  DataParallelRun run;
  run.dir = WorkersDir(r.outputs.data_root, r.job_id);
  std::error_code ec;
  std::filesystem::remove_all(run.dir, ec);  // an earlier attempt's keys would mislead Gloo
  std::filesystem::create_directories(run.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", run.dir, ": ", ec.message()));
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = false;
  if (!google::protobuf::util::MessageToJsonString(SpecForWorkers(r), &json, options).ok() ||
      !engine::io::WriteFileAtomically(run.dir + "/spec.json", json).ok()) {
    return absl::InternalError(absl::StrCat("cannot write ", run.dir, "/spec.json"));
  }
  const int n = r.resolved.workers;
  const int local = std::max(1, std::min(n, r.start_remote ? r.local_ranks : n));
  const int64_t resume_step = r.resume ? r.resume->step : 0;
  if (local > 1) {
    LocalWorkers::Options o;
    o.binary = r.worker_binary;
    o.log_dir = run.dir;
    o.world_size = n;
    for (int rank = 1; rank < local; ++rank) o.ranks.push_back(rank);
    o.args = {"--spec=" + run.dir + "/spec.json",
              "--job=" + r.job_id,
              absl::StrCat("--world_size=", n),
              "--rendezvous=" + run.dir + "/rendezvous",
              "--data_root=" + r.context.data_root,
              "--fashion_mnist_dir=" + r.context.fashion_mnist_dir,
              "--fortunes_dir=" + r.context.fortunes_dir,
              "--owner=" + r.owner,
              "--hostname=" + r.worker_host,
              absl::StrCat("--resume_step=", resume_step),
              absl::StrCat("--parent_pid=", getpid()),
              absl::StrCat("--timeout_ms=", r.worker_timeout.count())};
    if (std::getenv("OMP_NUM_THREADS") == nullptr) {
      // The ranks of one machine share its cores.
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      o.env.push_back(absl::StrCat("OMP_NUM_THREADS=", std::max(1, cores / local)));
    }
    if (r.resolved.device == engine::Device::kCuda) {
      // One device per rank: rank k's process sees only the k-th (its
      // device 0), as NCCL's launchers arrange it. Rank 0 (this process)
      // trains on device 0.
      o.rank_env = [](int rank) {
        return std::vector<std::string>{"CUDA_VISIBLE_DEVICES=" + VisibleDeviceOfRank(rank)};
      };
    }
    o.on_lost = [id = r.job_id](const std::string& why) {
      LogWarning("data-parallel worker lost", {{"job", id}, {"reason", why}});
    };
    absl::StatusOr<std::unique_ptr<LocalWorkers>> workers = LocalWorkers::Start(std::move(o));
    if (!workers.ok()) return workers.status();
    run.workers.push_back(*std::move(workers));
  }
  if (local < n) {
    absl::StatusOr<std::vector<std::unique_ptr<WorkerGroup>>> remote =
        r.start_remote(json, resume_step);
    if (!remote.ok()) {
      run.Kill();
      return remote.status();
    }
    for (auto& g : *remote) run.workers.push_back(std::move(g));
  }
  if (r.workers_started) {
    std::vector<std::string> where;
    for (const auto& w : run.workers) where.push_back(w->Where());
    r.workers_started(absl::StrJoin(where, "; "));
  }
  absl::StatusOr<std::shared_ptr<engine::dist::RendezvousStore>> store =
      engine::dist::FileStore(run.dir + "/rendezvous");
  if (!store.ok()) {
    run.Kill();
    return store.status();
  }
  absl::StatusOr<std::unique_ptr<engine::dist::ProcessGroup>> group;
  if (r.resolved.device == engine::Device::kCuda) {
    // The GPUs' collectives (the id through the same store).
    engine::dist::NcclOptions nccl;
    nccl.rank = 0;
    nccl.size = n;
    nccl.device = 0;
    nccl.store = *store;
    nccl.timeout = r.worker_timeout;
    group = engine::dist::ConnectNcclGroup(nccl);
  } else {
    engine::dist::GlooOptions g;
    g.rank = 0;
    g.size = n;
    g.store = *store;
    g.hostname = r.worker_host;
    g.timeout = r.worker_timeout;
    group = engine::dist::ConnectGloo(g);
  }
  if (!group.ok()) {
    const std::string lost = run.Finish(std::chrono::milliseconds(0));
    return absl::Status(group.status().code(),
                        absl::StrCat("the workers did not all connect: ",
                                     lost.empty() ? std::string(group.status().message()) : lost));
  }
  run.group = *std::move(group);
  return run;
}

// A data-parallel run that failed: the workers' side of the story first
// (a killed worker is the cause; rank 0's broken connection the symptom).
RunResult WorkerLost(DataParallelRun& run, const std::string& rank0) {
  // A local death is noticed within milliseconds, an agent's report within
  // a round trip; give them a moment.
  for (int i = 0; i < 100 && !run.lost(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::optional<std::string> lost = run.lost();
  run.Kill();
  RunResult r = Failed(lost ? absl::StrCat(*lost, " (rank 0: ", rank0, ")")
                            : absl::StrCat("rank 0: ", rank0));
  r.worker_lost = true;
  return r;
}

}  // namespace

absl::StatusOr<DataCache::Sets> DataCache::Load(const v1::DataSpec& data,
                                                const engine::runner::JobSpecContext& context,
                                                const engine::train::TrainerConfig& config) {
  // Files (and uploads) are read afresh: they can change between jobs.
  const bool cacheable = !data.has_file() && !(data.has_tokens() && !data.tokens().has_builtin());
  const std::string key = data.SerializeAsString();
  if (cacheable) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(key);
    if (it != sets_.end()) {
      it->second.last_used = ++clock_;
      return it->second.sets;
    }
  }
  // Loaded outside the lock: a large set must not hold up other jobs' hits.
  // (The config only bounds shard tokens by the model's vocabulary; shards
  // are never cached.)
  engine::train::TrainerConfig copy = config;
  absl::StatusOr<engine::runner::JobData> loaded =
      engine::runner::LoadJobData(data, context, &copy);
  if (!loaded.ok()) return loaded.status();
  Sets sets;
  if (loaded->tokens) {
    sets.tokens = std::make_shared<const engine::runner::TokenJobData>(std::move(*loaded->tokens));
  } else {
    sets.train = std::make_shared<const engine::data::Dataset>(std::move(loaded->train));
  }
  if (!loaded->tokens && loaded->test && loaded->test->num_examples > 0) {
    sets.test = std::make_shared<const engine::data::Dataset>(std::move(*loaded->test));
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = sets_.emplace(key, Cached{sets, 0});  // the first one loaded wins
    it->second.last_used = ++clock_;
    while (sets_.size() > kMaxSets) {
      sets_.erase(std::min_element(sets_.begin(), sets_.end(), [](const auto& a, const auto& b) {
        return a.second.last_used < b.second.last_used;
      }));
    }
    return it->second.sets;
  }
  return sets;
}

size_t DataCache::cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sets_.size();
}

RunResult RunJob(const RunRequest& request, const RunHooks& hooks, DataCache* data,
                 engine::train::CancellationToken* cancel) {
  try {
    if (hooks.check_data) {
      if (absl::Status s = hooks.check_data(); !s.ok()) return Failed(std::string(s.message()));
    }
    engine::train::TrainerConfig config = request.resolved.config;
    std::optional<DataParallelRun> parallel;
    if (request.resolved.workers > 1) {
      absl::StatusOr<DataParallelRun> started = StartDataParallel(request);
      if (!started.ok()) {
        RunResult r = Failed(std::string(started.status().message()));
        r.worker_lost = true;  // a worker that could not connect may next time
        return r;
      }
      parallel = *std::move(started);
      config.process_group = parallel->group.get();
    }
    absl::StatusOr<DataCache::Sets> sets = data->Load(request.spec.data(), request.context, config);
    if (!sets.ok()) return Failed(std::string(sets.status().message()));
    absl::StatusOr<std::unique_ptr<engine::train::Trainer>> created;
    if (!sets->tokens) {
      engine::nn::FillDataDims(&config.model, sets->train->feature_dim, sets->train->num_classes,
                               sets->train->example_shape);
    }
    // The weights to start from, checked against the model now that its
    // sizes are all known (a resumed job's checkpoint replaces them).
    if (!request.resume) {
      if (absl::Status s = engine::runner::LoadInitFrom(request.spec, request.context, &config);
          !s.ok()) {
        return Failed(std::string(s.message()));
      }
    }
    if (sets->tokens) {
      created = engine::train::Trainer::Create(config, sets->tokens->View());
    } else {
      created = engine::train::Trainer::Create(config, sets->train.get(), sets->test.get());
    }
    if (!created.ok()) return Failed(std::string(created.status().message()));
    engine::train::Trainer& trainer = **created;
    if (hooks.started) hooks.started(trainer.total_steps(), trainer.optimizer().state_bytes());
    if (request.resume) {
      if (absl::Status s = trainer.LoadState(*request.resume); !s.ok()) {
        return Failed(absl::StrCat("cannot resume from checkpoint: ", s.message()));
      }
    }
    absl::StatusOr<std::unique_ptr<RunOutputs>> outputs =
        RunOutputs::Open(request.job_id, &trainer, cancel, request.outputs);
    if (!outputs.ok()) return Failed(std::string(outputs.status().message()));
    TrainerEvents events(
        [&](v1::MetricsEvent e) {
          if (hooks.event) hooks.event(std::move(e));
        },
        request.resolved.workers);
    events.after_step = [&](const engine::train::StepMetrics& m) { (*outputs)->AfterStep(m); };
    events.after_eval = [&](const engine::train::EvalMetrics& e) { (*outputs)->AfterEval(e); };
    events.after_fp8 = [&](const engine::train::Fp8ScalingRecord& r) {
      (*outputs)->AfterFp8Scaling(r);
    };
    auto result = trainer.Run(&events, cancel);
    absl::StatusOr<engine::backend::Backend*> backend =
        engine::backend::BackendFor(request.resolved.device);
    if (request.resolved.device != engine::Device::kCpu && backend.ok()) {
      const engine::backend::DeviceMemoryStats mem = (*backend)->MemoryStats();
      LogInfo("device memory after the job (process-wide allocator)",
              {{"job", request.job_id},
               {"peak_in_use_bytes", std::to_string(mem.peak_in_use_bytes)},
               {"in_use_bytes", std::to_string(mem.in_use_bytes)},
               {"cached_bytes", std::to_string(mem.cached_bytes)},
               {"cuda_mallocs", std::to_string(mem.device_allocations)}});
    }
    if (parallel) {
      if (result.ok() && !result->cancelled) {
        // Leave together: no rank closes its connections while a peer reads.
        if (absl::Status s = parallel->group->Barrier(); !s.ok()) result = s;
      }
      if (!result.ok()) return WorkerLost(*parallel, std::string(result.status().message()));
      if (result->cancelled) {
        parallel->Kill();  // they wait in the next step's all-reduce
      } else if (std::string lost = parallel->Finish(request.worker_timeout); !lost.empty()) {
        LogWarning("a worker failed after the job's last step",
                   {{"job", request.job_id}, {"reason", lost}});
      }
    }
    if (!result.ok()) return Failed(std::string(result.status().message()));
    const absl::Status io_error = (*outputs)->Finish(result->cancelled);
    if (!io_error.ok()) {
      LogError("job storage failed",
               {{"job", request.job_id}, {"error", std::string(io_error.message())}});
      return Failed(absl::StrCat("storage error (is the data dir full or unwritable?): ",
                                 io_error.message()));
    }
    return {result->cancelled ? RunResult::Outcome::kCancelled : RunResult::Outcome::kSucceeded,
            ""};
  } catch (const std::exception& e) {
    // oneDNN reports unsupported configurations by throwing; a job failing
    // must never take the server down.
    return Failed(absl::StrCat("internal error: ", e.what()));
  }
}

}  // namespace ampd::server::jobs
