#include "tests/server/rpc_test_util.h"

#include <thread>

#include "google/protobuf/util/json_util.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"

namespace ampd::testing {

namespace v1 = ::ampd::v1;

v1::JobSpec ParseSpec(const std::string& json) {
  v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &spec).ok()) << json;
  return spec;
}

std::string WithPriority(const std::string& json, int priority) {
  const size_t close = json.find_last_of('}');
  EXPECT_NE(close, std::string::npos) << json;
  if (close == std::string::npos) return json;
  return json.substr(0, close) + ", \"priority\": " + std::to_string(priority) + "}";
}

std::vector<std::string> ViolatedFields(const grpc::Status& status) {
  std::vector<std::string> fields;
  google::rpc::Status details;
  if (!details.ParseFromString(status.error_details())) return fields;
  for (const auto& any : details.details()) {
    google::rpc::BadRequest bad;
    if (!any.UnpackTo(&bad)) continue;
    for (const auto& v : bad.field_violations()) fields.push_back(v.field());
  }
  return fields;
}

grpc::Status TryCreateJob(v1::TrainingService::Stub* stub, const std::string& json, v1::Job* job) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::CreateJobRequest req;
  *req.mutable_spec() = ParseSpec(json);
  return stub->CreateJob(&ctx, req, job);
}

v1::Job CreateJob(v1::TrainingService::Stub* stub, const std::string& json) {
  v1::Job job;
  grpc::Status s = TryCreateJob(stub, json, &job);
  EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << json;
  return job;
}

v1::Job GetJob(v1::TrainingService::Stub* stub, const std::string& name) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetJobRequest req;
  req.set_name(name);
  v1::Job job;
  grpc::Status s = stub->GetJob(&ctx, req, &job);
  EXPECT_TRUE(s.ok()) << name << ": " << s.error_message();
  return job;
}

void CancelJob(v1::TrainingService::Stub* stub, const std::string& name) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::CancelJobRequest req;
  req.set_name(name);
  v1::Job job;
  grpc::Status s = stub->CancelJob(&ctx, req, &job);
  EXPECT_TRUE(s.ok()) << name << ": " << s.error_message();
}

v1::Job WaitForState(v1::TrainingService::Stub* stub, const std::string& name,
                     const std::set<v1::JobState>& states, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  v1::Job job;
  while (std::chrono::steady_clock::now() < deadline) {
    job = GetJob(stub, name);
    if (states.count(job.state())) return job;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "job " << name << " stuck in " << v1::JobState_Name(job.state());
  return job;
}

int64_t RunningSinceNanos(const v1::Job& job) {
  for (const v1::StateChange& change : job.transitions()) {
    if (change.state() == v1::RUNNING) {
      return change.time().seconds() * 1000000000LL + change.time().nanos();
    }
  }
  return -1;
}

}  // namespace ampd::testing
