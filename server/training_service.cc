#include "server/training_service.h"

#include <atomic>
#include <chrono>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "google/protobuf/util/time_util.h"
#include "server/log.h"
#include "server/rpc_status.h"

namespace ampd::server {

namespace v1 = ::ampd::v1;

namespace {

std::atomic<int> g_open_streams{0};

// Open streams per principal, for max_streams_per_principal.
std::mutex g_streams_mu;
std::map<std::string, int>& StreamsByPrincipal() {
  static auto* m = new std::map<std::string, int>();
  return *m;
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  return FinishUnary(ctx, status);
}

// Maps the manager's and the engine's errors to statuses with details, from
// the subjects they carry (engine/core/error_subject.h); messages are never
// parsed. Spec field paths get `spec_prefix` ("spec." for CreateJob).
grpc::Status JobError(const absl::Status& s, const std::string& name,
                      const std::string& spec_prefix = "") {
  if (s.code() == absl::StatusCode::kNotFound) return NotFound("job", name);
  const std::vector<engine::core::ErrorSubject> subjects = engine::core::GetErrorSubjects(s);
  if (subjects.empty()) return ToGrpc(s);
  auto path = [&](const std::string& subject) {
    return subject == "request_id" ? subject : spec_prefix + subject;
  };
  switch (s.code()) {
    case absl::StatusCode::kResourceExhausted:
      return ResourceExhausted(subjects[0].subject, subjects[0].description);
    case absl::StatusCode::kFailedPrecondition:
      return FailedPrecondition(path(subjects[0].subject), subjects[0].description);
    case absl::StatusCode::kInvalidArgument: {
      std::vector<engine::runner::FieldViolation> violations;
      for (const engine::core::ErrorSubject& e : subjects) {
        violations.push_back({path(e.subject), e.description});
      }
      return InvalidArgument(violations);
    }
    default:
      return ToGrpc(s);
  }
}

bool ValidName(const std::string& name) { return !JobManager::IdFromName(name).empty(); }

// NOT_FOUND unless the job exists and `who` may see it (owner or admin):
// other principals' jobs are indistinguishable from missing ones.
grpc::Status CheckVisible(JobManager* jobs, const Principal& who, const std::string& name) {
  absl::StatusOr<v1::Job> job = jobs->Get(name);
  if (!job.ok() || !who.CanSee(job->owner())) return NotFound("job", name);
  return grpc::Status::OK;
}

}  // namespace

int TrainingServiceImpl::open_streams() { return g_open_streams.load(); }

grpc::ServerUnaryReactor* TrainingServiceImpl::CreateJob(grpc::CallbackServerContext* ctx,
                                                         const v1::CreateJobRequest* request,
                                                         v1::Job* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  if (request->request_id().size() > 128) {
    return Done(ctx, InvalidField("request_id", "must be at most 128 characters"));
  }
  // The manager resolves the spec (it knows the user's profiles) and reports
  // every violation at once; then limits, and the device's preconditions
  // ("spec.device": no GPU, or an op without a kernel there).
  absl::StatusOr<v1::Job> job =
      jobs_->Create(request->spec(), request->request_id(), who.name, who.admin);
  if (!job.ok()) return Done(ctx, JobError(job.status(), "", "spec."));
  *response = *job;
  LogInfo(
      "job created",
      {{"job", job->id()}, {"precision", job->precision()}, {"request_id", request->request_id()}});
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrainingServiceImpl::GetJob(grpc::CallbackServerContext* ctx,
                                                      const v1::GetJobRequest* request,
                                                      v1::Job* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  if (!ValidName(request->name())) return Done(ctx, InvalidField("name", "required"));
  absl::StatusOr<v1::Job> job = jobs_->Get(request->name());
  if (!job.ok() || !who.CanSee(job->owner())) return Done(ctx, NotFound("job", request->name()));
  *response = *job;
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrainingServiceImpl::ListJobs(grpc::CallbackServerContext* ctx,
                                                        const v1::ListJobsRequest* request,
                                                        v1::ListJobsResponse* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  std::vector<v1::JobState> states;
  for (int s : request->states()) states.push_back(static_cast<v1::JobState>(s));
  absl::StatusOr<JobManager::Page> page =
      jobs_->List(states, request->page_size(), request->page_token(),
                  who.admin ? std::nullopt : std::optional<std::string>(who.name));
  if (!page.ok()) return Done(ctx, JobError(page.status(), ""));
  for (auto& job : page->jobs) *response->add_jobs() = std::move(job);
  response->set_next_page_token(page->next_page_token);
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrainingServiceImpl::CancelJob(grpc::CallbackServerContext* ctx,
                                                         const v1::CancelJobRequest* request,
                                                         v1::Job* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  if (!ValidName(request->name())) return Done(ctx, InvalidField("name", "required"));
  if (grpc::Status v = CheckVisible(jobs_, who, request->name()); !v.ok()) return Done(ctx, v);
  absl::StatusOr<v1::Job> job = jobs_->Cancel(request->name());
  if (!job.ok()) return Done(ctx, JobError(job.status(), request->name()));
  *response = *job;
  LogInfo("job cancel requested", {{"job", job->id()}});
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* TrainingServiceImpl::DeleteJob(grpc::CallbackServerContext* ctx,
                                                         const v1::DeleteJobRequest* request,
                                                         google::protobuf::Empty*) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return Done(ctx, a);
  if (!ValidName(request->name())) return Done(ctx, InvalidField("name", "required"));
  if (grpc::Status v = CheckVisible(jobs_, who, request->name()); !v.ok()) return Done(ctx, v);
  absl::Status s = jobs_->Delete(request->name());
  if (!s.ok()) return Done(ctx, JobError(s, request->name()));
  LogInfo("job deleted", {{"job", JobManager::IdFromName(request->name())}});
  return Done(ctx, grpc::Status::OK);
}

namespace {

// One StreamMetrics call. It reads the job's history from its cursor and
// writes one event at a time; the job manager only pokes it (OnJobEvents),
// so training never waits on a slow client.
class MetricsStream : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Bridges the manager's weak listener to this reactor, which gRPC deletes.
  class Bridge : public EventListener {
   public:
    explicit Bridge(MetricsStream* stream) : stream_(stream) {}
    void OnJobEvents() override {
      std::lock_guard<std::mutex> lock(mu_);
      if (stream_) stream_->Pump(false);
    }
    void OnHeartbeat() override {
      std::lock_guard<std::mutex> lock(mu_);
      if (stream_) stream_->Pump(true);
    }
    void Detach() {
      std::lock_guard<std::mutex> lock(mu_);
      stream_ = nullptr;
    }

   private:
    std::mutex mu_;
    MetricsStream* stream_;
  };

  // `end`: stop (OK) once the cursor reaches it (history_only); SIZE_MAX: follow.
  MetricsStream(JobManager* jobs, std::string id, size_t cursor, std::string principal,
                size_t end)
      : jobs_(jobs),
        id_(std::move(id)),
        cursor_(cursor),
        end_(end),
        principal_(std::move(principal)) {
    ++g_open_streams;
    bridge_ = std::make_shared<Bridge>(this);
    jobs_->Listen(id_, bridge_);
    // A job in memory: its wire log, read with no lock of the manager's from
    // here on (so training never waits for this stream); else (a job in the
    // store only) pages of its history through ReadWire.
    log_ = jobs_->WireLogOf(id_);
    // Start with a heartbeat-free pump: replay history right away.
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked(false);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    PumpLocked(false);
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
  }

  void OnDone() override {
    bridge_->Detach();
    --g_open_streams;
    {
      std::lock_guard<std::mutex> lock(g_streams_mu);
      if (--StreamsByPrincipal()[principal_] == 0) StreamsByPrincipal().erase(principal_);
    }
    delete this;
  }

  void Pump(bool heartbeat) {
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked(heartbeat);
  }

 private:
  void PumpLocked(bool heartbeat) {
    if (heartbeat) heartbeat_due_ = true;
    if (writing_ || finished_) return;
    if (cursor_ >= end_) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    std::vector<grpc::Slice> events;
    bool terminal = false, training = false;
    absl::Status s = absl::OkStatus();
    if (log_) {
      const jobs::WireLog::Read r = log_->ReadFrom(cursor_, 1, &events);
      if (r.deleted) s = absl::NotFoundError("job");
      terminal = r.ended;
      training = r.training;
    } else {
      s = jobs_->ReadWire(id_, cursor_, 1, &events, &terminal, &training);
    }
    if (!s.ok()) {
      FinishLocked(NotFound("job", id_));
      return;
    }
    if (!events.empty()) {
      current_ = grpc::ByteBuffer(&events.front(), 1);  // shares the bytes
      ++cursor_;
      writing_ = true;
      StartWrite(&current_);
      return;
    }
    if (terminal) {
      FinishLocked(grpc::Status::OK);
      return;
    }
    // A job still being stopped has its last events to come (it is re-queued
    // with a state change); the stream ends after those.
    if (jobs_->shutting_down() && !training) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "ampd is shutting down; the job resumes when ampd restarts "
                                "(reconnect with since_step to continue)"));
      return;
    }
    if (heartbeat_due_) {
      heartbeat_due_ = false;
      v1::MetricsEvent heartbeat;  // per stream (its queue position), not kept
      // Not TimeUtil::GetCurrentTime(): protobuf 3.21's has whole seconds.
      const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
      *heartbeat.mutable_heartbeat()->mutable_time() =
          google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
              std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count());
      heartbeat.mutable_heartbeat()->set_queue_position(jobs_->QueuePosition(id_));
      grpc::Slice bytes(heartbeat.SerializeAsString());
      current_ = grpc::ByteBuffer(&bytes, 1);
      writing_ = true;
      StartWrite(&current_);
      return;
    }
  }

  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  JobManager* jobs_;
  std::string id_;
  size_t cursor_;
  size_t end_;
  std::string principal_;
  std::shared_ptr<Bridge> bridge_;
  std::shared_ptr<const jobs::WireLog> log_;
  std::mutex mu_;
  bool writing_ = false;
  bool finished_ = false;
  bool heartbeat_due_ = false;
  grpc::ByteBuffer current_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* TrainingServiceImpl::StreamMetrics(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw_request) {
  class Failed : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
   public:
    explicit Failed(const grpc::Status& s) { Finish(s); }
    void OnDone() override { delete this; }
  };
  v1::StreamMetricsRequest parsed;
  {
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (raw_request != nullptr && raw_request->Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
    }
    if (!parsed.ParseFromString(bytes)) {
      return new Failed(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     "not an ampd.v1.StreamMetricsRequest"));
    }
  }
  const v1::StreamMetricsRequest* request = &parsed;
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return new Failed(a);
  if (!ValidName(request->name())) return new Failed(InvalidField("name", "required"));
  if (grpc::Status v = CheckVisible(jobs_, who, request->name()); !v.ok()) return new Failed(v);
  if (request->since_step() < 0) {
    return new Failed(InvalidField("since_step", "must be >= 0"));
  }
  absl::StatusOr<size_t> cursor = jobs_->StartCursor(request->name(), request->since_step());
  if (!cursor.ok()) return new Failed(NotFound("job", request->name()));
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    int& open = StreamsByPrincipal()[who.name];
    if (open >= max_streams_per_principal_) {
      return new Failed(ResourceExhausted(
          "max_streams_per_principal",
          absl::StrCat("you already have ", open, " open metric streams (the limit)")));
    }
    ++open;  // released in MetricsStream::OnDone
  }
  const std::string id = JobManager::IdFromName(request->name());
  const size_t end = request->history_only() ? jobs_->HistorySize(id)
                                             : std::numeric_limits<size_t>::max();
  return new MetricsStream(jobs_, id, *cursor, who.name, end);
}

}  // namespace ampd::server
