// Integration tests over loopback against a real ampd process.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "health.grpc.pb.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

v1::JobSpec Spec(const std::string& json) {
  v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &spec).ok()) << json;
  return spec;
}

google::rpc::Status Details(const grpc::Status& s) {
  google::rpc::Status details;
  details.ParseFromString(s.error_details());
  return details;
}

std::vector<std::string> ViolatedFields(const grpc::Status& s) {
  std::vector<std::string> fields;
  const google::rpc::Status details = Details(s);
  for (const auto& any : details.details()) {
    google::rpc::BadRequest bad;
    if (any.UnpackTo(&bad)) {
      for (const auto& v : bad.field_violations()) fields.push_back(v.field());
    }
  }
  return fields;
}

class TrainingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(std::vector<std::string> flags) {
    server_ = std::make_unique<AmpdProcess>(std::move(flags));
    ASSERT_TRUE(server_->ok()) << server_->log();
    stub_ = v1::TrainingService::NewStub(server_->channel());
  }

  v1::Job Create(const std::string& json, const std::string& request_id = "") {
    grpc::ClientContext ctx;
    v1::CreateJobRequest req;
    *req.mutable_spec() = Spec(json);
    req.set_request_id(request_id);
    v1::Job job;
    grpc::Status s = stub_->CreateJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  grpc::Status TryCreate(const std::string& json, v1::Job* job = nullptr) {
    grpc::ClientContext ctx;
    v1::CreateJobRequest req;
    *req.mutable_spec() = Spec(json);
    v1::Job ignored;
    return stub_->CreateJob(&ctx, req, job ? job : &ignored);
  }

  v1::Job Get(const std::string& name) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_name(name);
    v1::Job job;
    grpc::Status s = stub_->GetJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  v1::Job WaitFor(const std::string& name, std::set<v1::JobState> states, int timeout_ms = 180000) {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
    v1::Job job;
    while (std::chrono::steady_clock::now() < deadline) {
      job = Get(name);
      if (states.count(job.state())) return job;
      std::this_thread::sleep_for(milliseconds(10));
    }
    ADD_FAILURE() << "job " << name << " stuck in " << v1::JobState_Name(job.state());
    return job;
  }

  // Reads a stream to its end (or `max_events`), returning the events.
  std::vector<v1::MetricsEvent> ReadStream(const std::string& name, int64_t since_step,
                                           grpc::Status* status, int max_events = 1 << 30) {
    grpc::ClientContext ctx;
    v1::StreamMetricsRequest req;
    req.set_name(name);
    req.set_since_step(since_step);
    auto reader = stub_->StreamMetrics(&ctx, req);
    std::vector<v1::MetricsEvent> events;
    v1::MetricsEvent e;
    while (static_cast<int>(events.size()) < max_events && reader->Read(&e)) events.push_back(e);
    if (static_cast<int>(events.size()) >= max_events) ctx.TryCancel();
    grpc::Status s = reader->Finish();
    if (status) *status = s;
    return events;
  }

  std::unique_ptr<AmpdProcess> server_;
  std::unique_ptr<v1::TrainingService::Stub> stub_;
};

std::vector<int64_t> StepsOf(const std::vector<v1::MetricsEvent>& events) {
  std::vector<int64_t> steps;
  for (const auto& e : events) {
    if (e.has_step_record()) steps.push_back(e.step_record().step());
  }
  return steps;
}

TEST_F(TrainingServiceTest, FullLifecycle) {
  v1::Job job = Create(TinyJobJson(30));
  EXPECT_EQ(job.name(), "jobs/" + job.id());
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.precision(), "32-true");
  grpc::Status status;
  std::vector<v1::MetricsEvent> events = ReadStream(job.name(), 0, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<int64_t> steps = StepsOf(events);
  ASSERT_EQ(steps.size(), 30u);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(steps[i], i + 1);
  int evals = 0;
  for (const auto& e : events) evals += e.has_eval();
  EXPECT_EQ(evals, 3);  // every 10 steps
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), v1::SUCCEEDED);

  v1::Job done = Get(job.id());  // a bare id works as well as jobs/ID
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.progress().step(), 30);
  EXPECT_EQ(done.progress().total_steps(), 30);
  EXPECT_GT(done.latest_eval().accuracy(), 0.0);
  ASSERT_EQ(done.transitions_size(), 3);
  EXPECT_EQ(done.transitions(0).state(), v1::QUEUED);
  EXPECT_EQ(done.transitions(1).state(), v1::RUNNING);
  EXPECT_EQ(done.transitions(2).state(), v1::SUCCEEDED);
  EXPECT_TRUE(done.has_create_time() && done.has_start_time() && done.has_end_time());
  EXPECT_LE(done.start_time().seconds(), done.end_time().seconds());

  grpc::ClientContext del_ctx;
  v1::DeleteJobRequest del;
  del.set_name(job.name());
  google::protobuf::Empty empty;
  ASSERT_TRUE(stub_->DeleteJob(&del_ctx, del, &empty).ok());
  grpc::ClientContext get_ctx;
  v1::GetJobRequest get;
  get.set_name(job.name());
  v1::Job gone;
  grpc::Status s = stub_->GetJob(&get_ctx, get, &gone);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  google::rpc::ResourceInfo info;
  const google::rpc::Status details = Details(s);
  ASSERT_EQ(details.details_size(), 1);
  ASSERT_TRUE(details.details(0).UnpackTo(&info));
  EXPECT_EQ(info.resource_type(), "job");
  EXPECT_EQ(info.resource_name(), job.name());
}

TEST_F(TrainingServiceTest, PaginationIsCompleteNewestFirstAndFiltered) {
  std::vector<std::string> created;
  for (int i = 0; i < 5; ++i) created.push_back(Create(TinyJobJson(2, "32-true", i)).name());
  for (const auto& n : created) WaitFor(n, {v1::SUCCEEDED});
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(2);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    ASSERT_TRUE(stub_->ListJobs(&ctx, req, &resp).ok());
    EXPECT_LE(resp.jobs_size(), 2);
    for (const auto& j : resp.jobs()) seen.push_back(j.name());
    token = resp.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  std::vector<std::string> newest_first(created.rbegin(), created.rend());
  EXPECT_EQ(seen, newest_first);

  grpc::ClientContext ctx;
  v1::ListJobsRequest req;
  req.add_states(v1::RUNNING);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(stub_->ListJobs(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 0);

  grpc::ClientContext bad_ctx;
  v1::ListJobsRequest bad;
  bad.set_page_token("not-a-token");
  grpc::Status s = stub_->ListJobs(&bad_ctx, bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"page_token"});
}

TEST_F(TrainingServiceTest, CreateWithTheSameRequestIdIsIdempotent) {
  v1::Job a = Create(TinyJobJson(5), "req-1");
  v1::Job b = Create(TinyJobJson(5), "req-1");
  EXPECT_EQ(a.id(), b.id());
  grpc::ClientContext ctx;
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  ASSERT_TRUE(stub_->ListJobs(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 1);
  // The same id with a different spec is a client bug, not a retry.
  grpc::ClientContext ctx2;
  v1::CreateJobRequest other;
  *other.mutable_spec() = Spec(TinyJobJson(6));
  other.set_request_id("req-1");
  v1::Job c;
  grpc::Status s = stub_->CreateJob(&ctx2, other, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"request_id"});
}

TEST_F(TrainingServiceTest, CancelWhileQueuedAndWhileRunning) {
  v1::Job running = Create(TinyJobJson(1000000));
  WaitFor(running.name(), {v1::RUNNING});
  v1::Job queued = Create(TinyJobJson(5));
  EXPECT_EQ(Get(queued.name()).state(), v1::QUEUED);

  grpc::ClientContext c1;
  v1::CancelJobRequest req;
  req.set_name(queued.name());
  v1::Job after;
  ASSERT_TRUE(stub_->CancelJob(&c1, req, &after).ok());
  EXPECT_EQ(after.state(), v1::CANCELLED);

  grpc::ClientContext c2;
  req.set_name(running.name());
  ASSERT_TRUE(stub_->CancelJob(&c2, req, &after).ok());
  EXPECT_TRUE(after.state() == v1::CANCELLING || after.state() == v1::CANCELLED);
  v1::Job cancelled = WaitFor(running.name(), {v1::CANCELLED}, 60000);
  // It stops within one step of the request (counted in steps, not seconds:
  // a loaded machine makes every step slow). The step the cancel saw may
  // still have been finishing.
  EXPECT_LE(cancelled.progress().step(), after.progress().step() + 2)
      << "cancel seen at step " << after.progress().step();
  EXPECT_LT(cancelled.progress().step(), 1000000);
  EXPECT_EQ(cancelled.failure_reason(), "cancelled by request");

  // Cancelling an ended job, and deleting a live one, are precondition errors.
  grpc::ClientContext c3;
  grpc::Status s = stub_->CancelJob(&c3, req, &after);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  v1::Job live = Create(TinyJobJson(1000000));
  WaitFor(live.name(), {v1::RUNNING});
  grpc::ClientContext c4;
  v1::DeleteJobRequest del;
  del.set_name(live.name());
  google::protobuf::Empty empty;
  s = stub_->DeleteJob(&c4, del, &empty);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("RUNNING"), std::string::npos) << s.error_message();
  grpc::ClientContext c5;
  req.set_name(live.name());
  ASSERT_TRUE(stub_->CancelJob(&c5, req, &after).ok());
}

TEST_F(TrainingServiceTest, FiftySubscribersSeeIdenticalSequences) {
  v1::Job job = Create(TinyJobJson(200));
  std::vector<std::vector<std::string>> seen(50);
  std::vector<std::thread> threads;
  for (int i = 0; i < 50; ++i) {
    threads.emplace_back([&, i] {
      grpc::Status status;
      for (const auto& e : ReadStream(job.name(), 0, &status)) {
        if (!e.has_heartbeat()) seen[i].push_back(e.SerializeAsString());
      }
      EXPECT_TRUE(status.ok()) << status.error_message();
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_GT(seen[0].size(), 200u);
  for (int i = 1; i < 50; ++i) EXPECT_EQ(seen[i], seen[0]) << "subscriber " << i;
}

TEST_F(TrainingServiceTest, ResumeAfterDisconnectHasNoGapAndNoDuplicate) {
  v1::Job job = Create(TinyJobJson(300));
  std::vector<int64_t> all;
  int64_t last = 0;
  int connections = 0;
  grpc::Status status;
  bool ended = false;
  while (!ended && connections < 50) {
    ++connections;
    // Each connection reads a few events, then drops.
    std::vector<v1::MetricsEvent> events = ReadStream(job.name(), last, &status, 37);
    for (const auto& e : events) {
      if (e.has_step_record()) {
        all.push_back(e.step_record().step());
        last = e.step_record().step();
      }
      if (e.has_state() && e.state().state() == v1::SUCCEEDED) ended = true;
    }
  }
  ASSERT_TRUE(ended);
  EXPECT_GT(connections, 3);
  ASSERT_EQ(all.size(), 300u);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(all[i], i + 1);
  // After the end, resuming from the last step still yields the final state.
  std::vector<v1::MetricsEvent> tail = ReadStream(job.name(), 300, &status);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].state().state(), v1::SUCCEEDED);
}

TEST_F(TrainingServiceTest, AStalledSubscriberNeverSlowsTrainingAndCatchesUpFromHistory) {
  v1::Job job = Create(TinyJobJson(2000));
  grpc::ClientContext ctx;
  v1::StreamMetricsRequest req;
  req.set_name(job.name());
  auto reader = stub_->StreamMetrics(&ctx, req);
  v1::MetricsEvent first;
  ASSERT_TRUE(reader->Read(&first));
  // The subscriber stops reading; training must still finish on its own.
  v1::Job done = WaitFor(job.name(), {v1::SUCCEEDED}, 180000);
  ASSERT_EQ(done.state(), v1::SUCCEEDED);
  std::vector<int64_t> steps;
  v1::MetricsEvent e;
  while (reader->Read(&e)) {
    if (e.has_step_record()) steps.push_back(e.step_record().step());
  }
  EXPECT_TRUE(reader->Finish().ok());
  ASSERT_EQ(steps.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(steps[i], i + 1);
}

TEST_F(TrainingServiceTest, InvalidSpecsNameEveryBadField) {
  grpc::Status s = TryCreate(R"({"training": {"batchSize": "-4", "steps": "0"},
      "model": {"mlp": {"hidden": [8, 0]}}, "optimizer": {"lr": 0},
      "data": {"builtin": "nope"}})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<std::string> fields = ViolatedFields(s);
  std::set<std::string> got(fields.begin(), fields.end());
  for (const char* f : {"spec.training.batch_size", "spec.training.steps",
                        "spec.model.mlp.hidden[1]", "spec.optimizer.lr", "spec.data.builtin"}) {
    EXPECT_TRUE(got.count(f)) << "missing " << f << " in " << s.error_message();
  }
  s = TryCreate(R"({"precision": {"profile": "fp8-mixed"}})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.precision.profile"});
  s = TryCreate(R"({"device": "DEVICE_CUDA"})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("CUDA"), std::string::npos) << s.error_message();
  s = TryCreate(R"({"model": {"mlp": {"hidden": [100000, 100000]}}})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_model_parameters"), std::string::npos);
  // The server is unharmed: a good job still runs to completion.
  v1::Job ok = Create(TinyJobJson(3));
  EXPECT_EQ(WaitFor(ok.name(), {v1::SUCCEEDED}).state(), v1::SUCCEEDED);
}

TEST_F(TrainingServiceTest, InvalidGptSpecsNameEveryBadField) {
  grpc::Status s = TryCreate(R"({"model": {"gpt": {"nHead": "3", "blockSize": "-1"}},
      "data": {"tokens": {"text": "../x.txt", "heldOutFraction": 2, "evalWindows": "-3"}}})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<std::string> fields = ViolatedFields(s);
  std::set<std::string> got(fields.begin(), fields.end());
  for (const char* f : {"spec.model.gpt.block_size", "spec.data.tokens.text",
                        "spec.data.tokens.held_out_fraction", "spec.data.tokens.eval_windows"}) {
    EXPECT_TRUE(got.count(f)) << "missing " << f << " in " << s.error_message();
  }
  s = TryCreate(R"({"model": {"gpt": {"nHead": "3"}}, "data": {"builtin": "fortunes"}})");
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.model.gpt.n_head"});
  s = TryCreate(R"({"model": {"gpt": {}}, "data": {"synthetic": {}}})");
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.data"});
  // Too large for this server's limits: refused before it is queued.
  s = TryCreate(R"({"model": {"gpt": {"nLayer": "48", "nEmbd": "1600", "nHead": "25",
      "blockSize": "1024", "vocabSize": "50257"}}, "data": {"builtin": "fortunes"}})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
}

// AIP-193: one BadRequest lists every violation, whichever stage finds it:
// the field checks, the precision's resolution (an unknown profile), and
// the checks that need the resolved model (a layer name).
TEST_F(TrainingServiceTest, FiveViolationsAcrossStagesComeBackInOneBadRequest) {
  grpc::Status s = TryCreate(R"({"model": {"mlp": {"hidden": [16]}},
      "data": {"synthetic": {"numExamples": 64, "featureDim": 8, "numClasses": 2}},
      "optimizer": {"lr": -1, "fp32StateLayers": ["fc9"], "adamw": {"stateBits": 8}},
      "schedule": {"minLrRatio": 3},
      "precision": {"profile": "bf17-mixed"},
      "training": {"batchSize": "0"}})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<std::string> fields = ViolatedFields(s);
  std::sort(fields.begin(), fields.end());
  EXPECT_EQ(fields,
            (std::vector<std::string>{"spec.optimizer.fp32_state_layers[0]", "spec.optimizer.lr",
                                      "spec.precision.profile", "spec.schedule.min_lr_ratio",
                                      "spec.training.batch_size"}))
      << s.error_message();
  // A bad model hides only what needs the model: the layer is not checked.
  s = TryCreate(R"({"model": {"mlp": {"hidden": [-4]}},
      "optimizer": {"fp32StateLayers": ["fc9"]}, "precision": {"profile": "bf17-mixed"}})");
  fields = ViolatedFields(s);
  std::sort(fields.begin(), fields.end());
  EXPECT_EQ(fields,
            (std::vector<std::string>{"spec.model.mlp.hidden[0]", "spec.precision.profile"}))
      << s.error_message();
}

// A GPT job over gRPC: its step records carry tokens/s and MFU, its
// evaluations val loss and bits per byte (and no accuracy).
TEST_F(TrainingServiceTest, AGptJobStreamsTokensPerSecondMfuAndBitsPerByte) {
  v1::Job job = Create(R"({"model": {"gpt": {"blockSize": "16", "nLayer": "1", "nHead": "2",
      "nEmbd": "32"}}, "data": {"builtin": "fortunes"},
      "precision": {"profile": "bf16-mixed"},
      "training": {"steps": "20", "batchSize": "4", "evalInterval": "10"}})");
  EXPECT_EQ(WaitFor(job.name(), {v1::SUCCEEDED, v1::FAILED}).state(), v1::SUCCEEDED)
      << Get(job.name()).failure_reason();
  grpc::Status status;
  std::vector<v1::MetricsEvent> events = ReadStream(job.name(), 0, &status);
  int steps = 0, evals = 0;
  for (const v1::MetricsEvent& e : events) {
    if (e.has_step_record()) {
      ++steps;
      const v1::StepRecord& r = e.step_record();
      EXPECT_DOUBLE_EQ(r.tokens_per_s(), r.samples_per_s() * 16);
      EXPECT_GT(r.mfu(), 0);
      EXPECT_LT(r.mfu(), 1);
    }
    if (e.has_eval()) {
      ++evals;
      EXPECT_EQ(e.eval().tokens(), 256 * 16);  // 256 windows by default
      EXPECT_NEAR(e.eval().bits_per_byte(), e.eval().loss() / std::log(2.0), 1e-12);
      EXPECT_EQ(e.eval().accuracy(), 0);
    }
  }
  EXPECT_EQ(steps, 20);
  EXPECT_EQ(evals, 2);
}

// An FP8 GPT job streams its scaling record (every FP8 tensor's scale and
// amax) at step 1 and its last step, each just before that step's record;
// every step record carries the time its step ended.
TEST_F(TrainingServiceTest, AnFp8GptJobStreamsItsScalingRecords) {
  v1::Job job = Create(R"({"model": {"gpt": {"blockSize": "16", "nLayer": "1", "nHead": "2",
      "nEmbd": "32"}}, "data": {"builtin": "fortunes"},
      "precision": {"profile": "fp8-hybrid"},
      "training": {"steps": "5", "batchSize": "4"}})");
  EXPECT_EQ(WaitFor(job.name(), {v1::SUCCEEDED, v1::FAILED}).state(), v1::SUCCEEDED)
      << Get(job.name()).failure_reason();
  grpc::Status status;
  std::vector<v1::MetricsEvent> events = ReadStream(job.name(), 0, &status);
  std::vector<int64_t> record_steps;
  int64_t last_ns = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const v1::MetricsEvent& e = events[i];
    if (e.has_step_record()) {
      const int64_t ns =
          google::protobuf::util::TimeUtil::TimestampToNanoseconds(e.step_record().time());
      EXPECT_GT(ns, last_ns) << "step " << e.step();
      last_ns = ns;
    }
    if (!e.has_fp8_scaling()) continue;
    const v1::Fp8ScalingRecord& r = e.fp8_scaling();
    record_steps.push_back(r.step());
    ASSERT_EQ(r.tensors_size(), 12);  // 4 linears x (input, weight, grad_output)
    EXPECT_EQ(r.tensors(0).layer(), "h.0.attn.c_attn");
    EXPECT_EQ(r.tensors(0).role(), "input");
    EXPECT_EQ(r.tensors(2).role(), "grad_output");
    EXPECT_EQ(r.tensors(11).layer(), "h.0.mlp.c_proj");
    for (const auto& t : r.tensors()) {
      EXPECT_GT(t.amax(), 0) << t.layer() << " " << t.role();
      // fp8_max over the largest amax of the history ("max"): this step's
      // after step 1, at most that later.
      const float max = t.role() == "grad_output" ? 57344.0f : 448.0f;  // E5M2, E4M3
      const float from_this_step = max / static_cast<float>(t.amax());
      if (r.step() == 1) {
        EXPECT_EQ(static_cast<float>(t.scale()), from_this_step) << t.layer() << " " << t.role();
      } else {
        EXPECT_LE(static_cast<float>(t.scale()), from_this_step) << t.layer() << " " << t.role();
      }
    }
    // Before its step's record (after it, at most the step's evaluation):
    // the step record stays the step's last event, where streams resume.
    size_t next = i + 1;
    while (next < events.size() && !events[next].has_step_record()) {
      EXPECT_EQ(events[next].step(), r.step());
      ++next;
    }
    ASSERT_LT(next, events.size());
    EXPECT_EQ(events[next].step_record().step(), r.step());
  }
  EXPECT_EQ(record_steps, (std::vector<int64_t>{1, 5}));
}

// init_from: a job starts from another job's final weights. With a learning
// rate of 1e-30 (too small to move any f32 weight: under half an ulp) and no
// weight decay the weights stay those, so its first evaluation is the first
// job's last one exactly; a file that does not fit the model is
// refused at CreateJob naming spec.init_from and the tensor.
TEST_F(TrainingServiceTest, AJobStartsFromAnotherJobsWeights) {
  const std::string model = R"("model": {"mlp": {"hidden": [16]}},
      "data": {"synthetic": {"numExamples": 256, "featureDim": 12, "numClasses": 3}})";
  const v1::Job first = Create("{" + model + R"(, "training": {"steps": "20", "batchSize": "32",
      "evalInterval": "20"}})");
  ASSERT_EQ(WaitFor(first.name(), {v1::SUCCEEDED, v1::FAILED}).state(), v1::SUCCEEDED);
  grpc::Status status;
  double last_eval = -1;
  for (const v1::MetricsEvent& e : ReadStream(first.name(), 0, &status)) {
    if (e.has_eval()) last_eval = e.eval().loss();
  }
  ASSERT_GT(last_eval, 0);
  const std::string weights = "jobs/" + first.id() + "/model.safetensors";
  const v1::Job second = Create("{" + model + R"(, "initFrom": ")" + weights + R"(",
      "optimizer": {"lr": 1e-30, "weightDecay": 0},
      "training": {"steps": "1", "batchSize": "32", "evalInterval": "1", "seed": "7"}})");
  const v1::Job done = WaitFor(second.name(), {v1::SUCCEEDED, v1::FAILED});
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  double first_eval = -1;
  for (const v1::MetricsEvent& e : ReadStream(second.name(), 0, &status)) {
    if (e.has_eval() && first_eval < 0) first_eval = e.eval().loss();
  }
  EXPECT_EQ(first_eval, last_eval);

  // Another model's weights: refused before the job is queued.
  grpc::Status s = TryCreate(R"({"model": {"mlp": {"hidden": [8]}},
      "data": {"synthetic": {"numExamples": 256, "featureDim": 12, "numClasses": 3}},
      "initFrom": ")" + weights +
                             R"("})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.init_from"}) << s.error_message();
  EXPECT_NE(s.error_message().find("tensor fc1.weight has shape [16, 12] in the file and [8, 12] "
                                   "in the model"),
            std::string::npos)
      << s.error_message();
  // A path outside the data root, and a file that is not there.
  s = TryCreate("{" + model + R"(, "initFrom": "../../etc/passwd"})");
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.init_from"}) << s.error_message();
  s = TryCreate("{" + model + R"(, "initFrom": "jobs/nope/model.safetensors"})");
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.init_from"}) << s.error_message();
}

// GetJob reports the optimizer state a job allocated: 8-bit AdamW states are
// a quarter of f32 ones, plus an absmax per 256 values.
TEST_F(TrainingServiceTest, GetJobReportsTheOptimizerStateBytesAllocated) {
  const std::string spec = R"({"model": {"mlp": {"hidden": [512]}},
      "data": {"synthetic": {"numExamples": 256, "featureDim": 512, "numClasses": 4}},
      "optimizer": {"adamw": {"stateBits": BITS}},
      "training": {"steps": "3", "batchSize": "32"}})";
  std::map<int, int64_t> bytes;
  for (const int bits : {32, 8}) {
    std::string s = spec;
    s.replace(s.find("BITS"), 4, std::to_string(bits));
    const v1::Job job = Create(s);
    const v1::Job done = WaitFor(job.name(), {v1::SUCCEEDED, v1::FAILED});
    ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
    bytes[bits] = done.optimizer_state_bytes();
    if (bits == 8) {
      EXPECT_NE(done.optimizer().find("weight decay"), std::string::npos) << done.optimizer();
    }
  }
  // fc1 512x512 and head 4x512 (< 4096: f32) weights, biases f32.
  EXPECT_EQ(bytes[32], 2 * 4 * (512 * 512 + 512 + 4 * 512 + 4));
  EXPECT_EQ(bytes[8], 2 * ((512 * 512 + 4 * 1024) + 4 * (512 + 4 * 512 + 4)));
  // A CUDA job with 8-bit states is refused naming the field (no GPU here:
  // the device itself is refused first, with its own field).
  grpc::Status s = TryCreate(R"({"optimizer": {"adamw": {"stateBits": 4}}})");
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.optimizer.adamw.state_bits"});
}

TEST_F(TrainingServiceTest, BadDataFailsTheJobWithAReasonAndTheServerGoesOn) {
  v1::Job job =
      Create(R"({"data": {"file": {"format": "FORMAT_CSV", "trainCsv": "missing.csv"}}})");
  v1::Job failed = WaitFor(job.name(), {v1::FAILED});
  EXPECT_NE(failed.failure_reason().find("missing.csv"), std::string::npos)
      << failed.failure_reason();
  grpc::Status status;
  std::vector<v1::MetricsEvent> events = ReadStream(job.name(), 0, &status);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state().state(), v1::FAILED);
  EXPECT_EQ(WaitFor(Create(TinyJobJson(2)).name(), {v1::SUCCEEDED}).state(), v1::SUCCEEDED);
}

TEST_F(TrainingServiceTest, UnknownJobsAreNotFoundEverywhere) {
  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_name("jobs/nope");
  v1::Job job;
  EXPECT_EQ(stub_->CancelJob(&ctx, req, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::Status status;
  ReadStream("jobs/nope", 0, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext ctx2;
  v1::GetJobRequest get;
  EXPECT_EQ(stub_->GetJob(&ctx2, get, &job).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(TrainingServiceTest, QueueLimitAndHeartbeatsWhileQueued) {
  Start({"--max_queued_jobs=1"});
  v1::Job running = Create(TinyJobJson(1000000));
  WaitFor(running.name(), {v1::RUNNING});
  v1::Job queued = Create(TinyJobJson(5));
  grpc::Status s = TryCreate(TinyJobJson(5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_queued_jobs"), std::string::npos) << s.error_message();
  // A stream on the queued job gets heartbeats with its queue position.
  grpc::Status status;
  std::vector<v1::MetricsEvent> events = ReadStream(queued.name(), 0, &status, 4);
  int heartbeats = 0;
  for (const auto& e : events) {
    if (e.has_heartbeat()) {
      ++heartbeats;
      EXPECT_EQ(e.heartbeat().queue_position(), 0);
    }
  }
  EXPECT_GE(heartbeats, 2);
}

TEST_F(TrainingServiceTest, SigtermDrainsGracefully) {
  // A long grace period: stopping must not wait it out once every stream has
  // ended (gRPC 1.51 would hold Shutdown to its deadline for idle connections).
  server_->Stop();
  Start({"--shutdown_grace_ms=60000"});
  v1::Job running = Create(TinyJobJson(1000000));
  WaitFor(running.name(), {v1::RUNNING});
  v1::Job queued = Create(TinyJobJson(5));
  auto health = grpc::health::v1::Health::NewStub(server_->channel());
  {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    kill(server_->pid(), SIGTERM);
  });
  grpc::Status status;
  std::vector<v1::MetricsEvent> events = ReadStream(running.name(), 0, &status);
  stopper.join();
  // The job is not lost: the stream says the server is going away and that
  // the job resumes on restart (it is re-queued in the store).
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_NE(status.error_message().find("resumes"), std::string::npos) << status.error_message();
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), v1::QUEUED);
  const auto stop_start = std::chrono::steady_clock::now();
  EXPECT_EQ(server_->Stop(), 0);
  // Far below the 60 s grace period, with room for a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, std::chrono::seconds(20))
      << server_->log();
  EXPECT_NE(server_->log().find("\"msg\":\"stopped\""), std::string::npos) << server_->log();
}

}  // namespace
}  // namespace ampd::testing
