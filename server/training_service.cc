#include "server/training_service.h"

#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "google/protobuf/util/time_util.h"
#include "server/generation.h"
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
  MetricsStream(JobManager* jobs, std::string id, size_t cursor, std::string principal, size_t end)
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
      heartbeat.mutable_heartbeat()->set_waiting_for(jobs_->WaitingFor(id_));
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
      return new Failed(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not an ampd.v1.StreamMetricsRequest"));
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
  const size_t end =
      request->history_only() ? jobs_->HistorySize(id) : std::numeric_limits<size_t>::max();
  return new MetricsStream(jobs_, id, *cursor, who.name, end);
}

namespace {

std::atomic<int> g_generations{0};

// One Generate call: the model is loaded and the tokens sampled on a thread
// of its own (never on gRPC's callback threads, so a long generation blocks
// nothing else); each token is queued and written as soon as the previous
// write is done, several at once when the client reads slower than the
// model writes. A cancelled call (or a client gone) stops the generation at
// its next token.
class GenerateStream : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateStream(const v1::Job& job, v1::GenerateRequest request,
                 engine::generate::GenerateOptions options, std::string data_root,
                 engine::runner::JobSpecContext context)
      : job_(job),
        request_(std::move(request)),
        options_(options),
        data_root_(std::move(data_root)),
        context_(std::move(context)) {
    worker_ = std::thread([this] { Run(); });
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      cancelled_ = true;
      broken_ = true;
    }
    PumpLocked();
  }
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override {
    worker_.join();
    --g_generations;
    delete this;
  }

 private:
  void Run() {
    grpc::Status status = Generate();
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_ && status.ok()) {
      status = grpc::Status(grpc::StatusCode::CANCELLED, "generation cancelled");
    }
    status_ = status;
    finished_ = true;
    PumpLocked();
  }

  grpc::Status Generate() {
    absl::StatusOr<GenerationModel> model =
        LoadGenerationModel(job_, request_.artifact(), data_root_, context_);
    if (!model.ok()) {
      const std::string message(model.status().message());
      switch (model.status().code()) {
        case absl::StatusCode::kFailedPrecondition:
          return FailedPrecondition("name", message);
        case absl::StatusCode::kInvalidArgument:
          return InvalidField("artifact", message);
        case absl::StatusCode::kNotFound:
          return NotFound("artifact", request_.name() + "/" + message);
        default:
          return ToGrpc(model.status());
      }
    }
    std::vector<int32_t> prompt(request_.prompt_tokens().begin(), request_.prompt_tokens().end());
    if (!request_.prompt().empty()) {
      if (!model->byte_level) {
        return InvalidField("prompt",
                            "job " + job_.id() +
                                "'s model reads token ids (its data are token shards): send "
                                "prompt_tokens");
      }
      for (unsigned char c : request_.prompt()) prompt.push_back(c);
    }
    const int64_t vocab = model->generator->spec().vocab_size;
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (prompt[i] < 0 || prompt[i] >= vocab) {
        return InvalidField("prompt",
                            absl::StrCat("token ", i, " is ", prompt[i],
                                         ", outside the model's vocabulary [0, ", vocab, ")"));
      }
    }
    byte_level_ = model->byte_level;
    // The first response, before any token: what is sampled, with what seed.
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.set_artifact(model->artifact);
      pending_.set_seed(options_.sampling.seed);
      pending_.set_byte_level(byte_level_);
      PumpLocked();
    }
    absl::StatusOr<engine::generate::GenerateResult> r =
        model->generator->Generate(prompt, options_, [this](int32_t token) {
          if (cancelled_) return false;
          std::lock_guard<std::mutex> lock(mu_);
          pending_.add_tokens(token);
          if (byte_level_) *pending_.mutable_text() += utf8_.Push(static_cast<uint8_t>(token));
          PumpLocked();
          return true;
        });
    if (!r.ok()) {
      const std::vector<engine::core::ErrorSubject> subjects =
          engine::core::GetErrorSubjects(r.status());
      if (r.status().code() == absl::StatusCode::kInvalidArgument && !subjects.empty()) {
        return InvalidField(subjects[0].subject, subjects[0].description);
      }
      return ToGrpc(r.status());
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (byte_level_) *pending_.mutable_text() += utf8_.Flush();
    pending_.set_done(true);
    pending_.set_tokens_generated(r->tokens);
    pending_.set_tokens_per_second(r->seconds > 0 ? r->tokens / r->seconds : 0);
    LogInfo("generation done",
            {{"job", job_.id()},
             {"tokens", std::to_string(r->tokens)},
             {"tokens_per_s", absl::StrCat(r->tokens / std::max(r->seconds, 1e-9))}});
    return grpc::Status::OK;
  }

  // Under mu_: the next write (what is pending), or Finish once all is sent.
  void PumpLocked() {
    if (writing_ || finish_called_) return;
    const bool has_content = pending_.ByteSizeLong() > 0;
    if (has_content && !broken_) {
      current_ = std::move(pending_);
      pending_.Clear();
      writing_ = true;
      StartWrite(&current_);
      return;
    }
    if (finished_) {
      finish_called_ = true;
      Finish(status_);
    }
  }

  const v1::Job job_;
  const v1::GenerateRequest request_;
  const engine::generate::GenerateOptions options_;
  const std::string data_root_;
  const engine::runner::JobSpecContext context_;
  std::atomic<bool> cancelled_{false};
  bool byte_level_ = false;
  std::mutex mu_;
  Utf8Decoder utf8_;              // under mu_
  v1::GenerateResponse pending_;  // what the next write sends
  v1::GenerateResponse current_;  // what is being written
  bool writing_ = false, broken_ = false, finished_ = false, finish_called_ = false;
  grpc::Status status_;
  std::thread worker_;  // last: started when everything else is
};

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* TrainingServiceImpl::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* request) {
  class Failed : public grpc::ServerWriteReactor<v1::GenerateResponse> {
   public:
    explicit Failed(const grpc::Status& s) { Finish(s); }
    void OnDone() override { delete this; }
  };
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return new Failed(a);
  if (!ValidName(request->name())) return new Failed(InvalidField("name", "required"));
  if (!request->prompt().empty() && request->prompt_tokens_size() > 0) {
    return new Failed(InvalidField("prompt", "give prompt or prompt_tokens, not both"));
  }
  if (request->prompt().empty() && request->prompt_tokens_size() == 0) {
    return new Failed(InvalidField("prompt", "required (text, or prompt_tokens)"));
  }
  if (request->max_new_tokens() < 0 || request->max_new_tokens() > 65536) {
    return new Failed(InvalidField(
        "max_new_tokens",
        absl::StrCat("must be in 1..65536 (0: 256), got ", request->max_new_tokens())));
  }
  engine::generate::GenerateOptions options;
  options.max_new_tokens = request->max_new_tokens() == 0 ? 256 : request->max_new_tokens();
  options.sampling.temperature = request->has_temperature() ? request->temperature() : 1.0;
  options.sampling.top_k = request->top_k();
  options.sampling.top_p = request->has_top_p() ? request->top_p() : 1.0;
  options.sampling.seed =
      request->has_seed() ? request->seed() : std::random_device()() * 0x100000001ull;
  if (absl::Status s = engine::generate::ValidateSampling(options.sampling); !s.ok()) {
    const auto subjects = engine::core::GetErrorSubjects(s);
    return new Failed(InvalidField(subjects[0].subject, subjects[0].description));
  }
  absl::StatusOr<v1::Job> job = jobs_->Get(request->name());
  if (!job.ok() || !who.CanSee(job->owner())) return new Failed(NotFound("job", request->name()));
  if (++g_generations > max_generations_) {
    --g_generations;
    return new Failed(ResourceExhausted(
        "max_generations",
        absl::StrCat("this server runs at most ", max_generations_,
                     " generations at once (--max_generations); try again shortly")));
  }
  // The spec resolves as it did for its owner (their profiles).
  return new GenerateStream(*job, *request, options, jobs_->data_root(),
                            jobs_->SpecContext(job->owner(), false));
}

}  // namespace ampd::server
