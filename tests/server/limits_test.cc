// Confined file access and per-job / per-principal limits: each refusal names
// the field or the limit, and nothing else is disturbed.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ampd/v1/artifact_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "engine/io/sha256.h"
#include "google/protobuf/util/json_util.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;

std::string Sha256Hex(const std::string& data) {
  engine::io::Sha256 sha;
  sha.Update(data);
  return sha.FinishHex();
}

grpc::Status Create(v1::TrainingService::Stub* stub, const std::string& json, v1::Job* job) {
  grpc::ClientContext ctx;
  v1::CreateJobRequest req;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, req.mutable_spec()).ok());
  return stub->CreateJob(&ctx, req, job);
}

std::vector<std::string> Fields(const grpc::Status& s) {
  google::rpc::Status details;
  details.ParseFromString(s.error_details());
  std::vector<std::string> out;
  for (const auto& any : details.details()) {
    google::rpc::BadRequest bad;
    if (any.UnpackTo(&bad)) {
      for (const auto& v : bad.field_violations()) out.push_back(v.field());
    }
  }
  return out;
}

void WaitRunning(v1::TrainingService::Stub* stub, const std::string& name) {
  for (int i = 0; i < 3000; ++i) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_name(name);
    v1::Job job;
    if (stub->GetJob(&ctx, req, &job).ok() && job.state() == v1::RUNNING) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << name << " never started";
}

TEST(LimitsTest, PathsEscapingTheDataRootAreRefusedAndLogged) {
  AmpdProcess server;
  ASSERT_TRUE(server.ok());
  auto stub = v1::TrainingService::NewStub(server.channel());
  // A symlink inside the data root that points outside it.
  const std::string outside = server.data_dir() + "_outside.csv";
  { std::ofstream(outside) << "1,2,0\n3,4,1\n"; }
  // (Uploads of the unauthenticated principal "local" live in uploads/local.)
  const std::string mine = server.data_dir() + "/uploads/local";
  std::filesystem::create_directories(mine);
  std::filesystem::create_symlink(outside, mine + "/link.csv");
  v1::Job job;
  grpc::Status s = Create(stub.get(), R"({"data": {"file": {"format": "FORMAT_CSV",
      "trainCsv": "uploads/link.csv"}}})",
                          &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(Fields(s), std::vector<std::string>{"spec.data.file.train_csv"}) << s.error_message();
  EXPECT_NE(server.log().find("refused a data path outside the data root"), std::string::npos);
  for (const char* path : {"../../etc/passwd", "/etc/passwd"}) {
    s = Create(
        stub.get(),
        std::string(R"({"data": {"file": {"format": "FORMAT_CSV", "trainCsv": ")") + path + "\"}}}",
        &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_EQ(Fields(s), std::vector<std::string>{"spec.data.file.train_csv"}) << path;
  }
  // A symlink that stays inside the root is fine.
  { std::ofstream(mine + "/real.csv") << "1,2,0\n3,4,1\n5,6,0\n7,8,1\n"; }
  std::filesystem::create_symlink(mine + "/real.csv", mine + "/alias.csv");
  // Another principal's directory is outside this one's uploads.
  std::filesystem::create_directories(server.data_dir() + "/uploads/bob");
  { std::ofstream(server.data_dir() + "/uploads/bob/secret.csv") << "1,2,0\n"; }
  std::filesystem::create_symlink(server.data_dir() + "/uploads/bob/secret.csv",
                                  mine + "/peek.csv");
  s = Create(stub.get(),
             R"({"data": {"file": {"format": "FORMAT_CSV", "trainCsv": "uploads/peek.csv"}}})",
             &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  s = Create(stub.get(),
             R"({"data": {"file": {"format": "FORMAT_CSV", "trainCsv": "uploads/alias.csv"}},
      "training": {"steps": 2, "batchSize": 2}})",
             &job);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST(LimitsTest, MemoryQueueAndStreamLimitsNameTheLimit) {
  AmpdProcess server({"--max_job_memory_bytes=2000000", "--max_queued_jobs_per_principal=1",
                      "--max_streams_per_principal=2"});
  ASSERT_TRUE(server.ok());
  auto stub = v1::TrainingService::NewStub(server.channel());
  v1::Job job;
  grpc::Status s = Create(stub.get(), R"({"model": {"mlp": {"hidden": [1024]}}})", &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_job_memory_bytes"), std::string::npos) << s.error_message();

  v1::Job running;
  ASSERT_TRUE(Create(stub.get(), TinyJobJson(1000000), &running).ok());
  WaitRunning(stub.get(), running.name());
  v1::Job queued;
  ASSERT_TRUE(Create(stub.get(), TinyJobJson(5), &queued).ok());
  s = Create(stub.get(), TinyJobJson(5), &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_queued_jobs_per_principal"), std::string::npos)
      << s.error_message();

  // Two streams are allowed; the third is refused while they are open.
  grpc::ClientContext c1, c2, c3;
  v1::StreamMetricsRequest req;
  req.set_name(running.name());
  auto r1 = stub->StreamMetrics(&c1, req);
  auto r2 = stub->StreamMetrics(&c2, req);
  v1::MetricsEvent e;
  ASSERT_TRUE(r1->Read(&e));
  ASSERT_TRUE(r2->Read(&e));
  auto r3 = stub->StreamMetrics(&c3, req);
  EXPECT_FALSE(r3->Read(&e));
  s = r3->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_streams_per_principal"), std::string::npos);
  c1.TryCancel();
  r1->Finish();
  // A closed stream frees its slot.
  bool reopened = false;
  for (int i = 0; i < 100 && !reopened; ++i) {
    grpc::ClientContext c4;
    auto r4 = stub->StreamMetrics(&c4, req);
    reopened = r4->Read(&e);
    c4.TryCancel();
    r4->Finish();
    if (!reopened) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(reopened);
  c2.TryCancel();
  r2->Finish();
}

TEST(LimitsTest, UploadsCountAgainstAPerPrincipalQuota) {
  AmpdProcess server({"--upload_quota_bytes_per_principal=40"});
  ASSERT_TRUE(server.ok());
  auto stub = v1::ArtifactService::NewStub(server.channel());
  auto upload = [&](const std::string& path, const std::string& data) {
    grpc::ClientContext ctx;
    v1::UploadedDataset out;
    auto w = stub->UploadDataset(&ctx, &out);
    v1::UploadDatasetRequest m;
    m.mutable_header()->set_path(path);
    m.mutable_header()->set_size_bytes(data.size());
    m.mutable_header()->set_sha256(Sha256Hex(data));
    w->Write(m);
    m.Clear();
    m.set_chunk(data);
    w->Write(m);
    w->WritesDone();
    return w->Finish();
  };
  const std::string data(30, 'a');
  EXPECT_TRUE(upload("one.csv", data).ok());
  grpc::Status s = upload("two.csv", data);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("upload_quota_bytes_per_principal"), std::string::npos)
      << s.error_message();
  EXPECT_FALSE(std::filesystem::exists(server.data_dir() + "/uploads/local/two.csv"));
}

}  // namespace
}  // namespace ampd::testing
