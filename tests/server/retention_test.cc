// Retention of ended jobs (--max_terminal_jobs, --retain_terminal_jobs_days):
// old jobs disappear with their history and every file (checkpoints,
// weights, TensorBoard), each removal is logged, queued and running jobs are
// never touched, and DeleteJob removes the files too.
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ampd/v1/training_service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

class Jobs {
 public:
  explicit Jobs(const AmpdProcess& p) : stub_(v1::TrainingService::NewStub(p.channel())) {}
  v1::Job Create(const std::string& json) {
    grpc::ClientContext ctx;
    v1::CreateJobRequest req;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, req.mutable_spec()).ok());
    v1::Job job;
    grpc::Status s = stub_->CreateJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }
  grpc::Status Get(const std::string& name, v1::Job* job = nullptr) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_name(name);
    v1::Job unused;
    return stub_->GetJob(&ctx, req, job ? job : &unused);
  }
  v1::JobState WaitFor(const std::string& name, std::vector<v1::JobState> states) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    v1::Job job;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Get(name, &job).ok()) {
        for (v1::JobState s : states) {
          if (job.state() == s) return s;
        }
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    ADD_FAILURE() << name << " is " << v1::JobState_Name(job.state());
    return job.state();
  }
  grpc::Status Delete(const std::string& name) {
    grpc::ClientContext ctx;
    v1::DeleteJobRequest req;
    req.set_name(name);
    google::protobuf::Empty e;
    return stub_->DeleteJob(&ctx, req, &e);
  }
  grpc::Status Cancel(const std::string& name) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_name(name);
    v1::Job j;
    return stub_->CancelJob(&ctx, req, &j);
  }

 private:
  std::unique_ptr<v1::TrainingService::Stub> stub_;
};

std::vector<std::string> Dirs(const std::string& data_dir, const std::string& id) {
  return {data_dir + "/checkpoints/" + id, data_dir + "/tensorboard/" + id,
          data_dir + "/jobs/" + id};
}

// Removal is logged once the files are gone too (after the job stopped being
// visible): waits for that line.
bool WaitForRemovalLog(const AmpdProcess& server, const std::string& id) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string log = server.log();
    for (size_t at = log.find("retention removed a job"); at != std::string::npos;
         at = log.find("retention removed a job", at + 1)) {
      const size_t end = log.find('\n', at);
      if (log.substr(at, end - at).find("\"job\":\"" + id + "\"") != std::string::npos) {
        return true;
      }
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

bool AnyExists(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    if (std::filesystem::exists(d)) return true;
  }
  return false;
}

// A job that leaves every kind of file: a checkpoint (every 20 steps),
// TensorBoard scalars and its final weights.
const char kShortJob[] = R"({"data": {"synthetic": {"numExamples": 64, "featureDim": 8,
    "numClasses": 2}}, "training": {"steps": "30", "batchSize": "16"}})";
const char kLongJob[] = R"({"data": {"synthetic": {"numExamples": 64, "featureDim": 8,
    "numClasses": 2}}, "training": {"steps": "100000000", "batchSize": "16"}})";

TEST(RetentionTest, TheOldestEndedJobsGoWithAllTheirFilesAndLiveJobsStay) {
  AmpdProcess server({"--max_terminal_jobs=2", "--checkpoint_every_steps=20"});
  ASSERT_TRUE(server.ok()) << server.log();
  Jobs jobs(server);
  std::vector<v1::Job> ended;
  for (int i = 0; i < 4; ++i) {
    ended.push_back(jobs.Create(kShortJob));
    ASSERT_EQ(jobs.WaitFor(ended.back().name(), {v1::SUCCEEDED}), v1::SUCCEEDED);
    if (i == 0) {
      for (const std::string& d : Dirs(server.data_dir(), ended[0].id())) {
        EXPECT_TRUE(std::filesystem::exists(d)) << d;  // the files the test expects to go
      }
    }
  }
  // A running job and one queued behind it (one CPU worker).
  const v1::Job running = jobs.Create(kLongJob);
  ASSERT_EQ(jobs.WaitFor(running.name(), {v1::RUNNING}), v1::RUNNING);
  const v1::Job queued = jobs.Create(kLongJob);
  // Removal happens as each job ends: by now the first two are gone.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && jobs.Get(ended[1].name()).ok()) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(jobs.Get(ended[i].name()).error_code(), grpc::StatusCode::NOT_FOUND) << i;
    EXPECT_TRUE(WaitForRemovalLog(server, ended[i].id())) << i << "\n" << server.log();
    EXPECT_FALSE(AnyExists(Dirs(server.data_dir(), ended[i].id()))) << i;
  }
  for (int i = 2; i < 4; ++i) EXPECT_TRUE(jobs.Get(ended[i].name()).ok()) << i;
  v1::Job r, q;
  ASSERT_TRUE(jobs.Get(running.name(), &r).ok());
  ASSERT_TRUE(jobs.Get(queued.name(), &q).ok());
  EXPECT_EQ(r.state(), v1::RUNNING);
  EXPECT_EQ(q.state(), v1::QUEUED);

  // A restart keeps what retention kept, and nothing it removed comes back.
  const std::string data_dir = server.data_dir();
  ASSERT_TRUE(jobs.Cancel(queued.name()).ok());
  ASSERT_TRUE(jobs.Cancel(running.name()).ok());
  jobs.WaitFor(running.name(), {v1::CANCELLED});
  jobs.WaitFor(queued.name(), {v1::CANCELLED});
  server.Stop();
  AmpdProcess again({"--max_terminal_jobs=2"}, data_dir);
  ASSERT_TRUE(again.ok()) << again.log();
  Jobs after(again);
  // Four ended jobs now (two short, two cancelled): the two cancelled, newest, stay.
  EXPECT_TRUE(after.Get(running.name()).ok());
  EXPECT_TRUE(after.Get(queued.name()).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(after.Get(ended[i].name()).error_code(), grpc::StatusCode::NOT_FOUND) << i;
    EXPECT_FALSE(AnyExists(Dirs(data_dir, ended[i].id()))) << i;
  }
}

TEST(RetentionTest, JobsOlderThanTheRetentionPeriodGoAndDeleteJobRemovesFiles) {
  // 0.00002 days: about 1.7 s.
  AmpdProcess server({"--retain_terminal_jobs_days=0.00002", "--checkpoint_every_steps=20",
                      "--heartbeat_interval_ms=100"});
  ASSERT_TRUE(server.ok()) << server.log();
  Jobs jobs(server);
  const v1::Job old_job = jobs.Create(kShortJob);
  ASSERT_EQ(jobs.WaitFor(old_job.name(), {v1::SUCCEEDED}), v1::SUCCEEDED);
  EXPECT_TRUE(AnyExists(Dirs(server.data_dir(), old_job.id())));
  const v1::Job running = jobs.Create(kLongJob);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && jobs.Get(old_job.name()).ok()) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(jobs.Get(old_job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(WaitForRemovalLog(server, old_job.id())) << server.log();
  EXPECT_FALSE(AnyExists(Dirs(server.data_dir(), old_job.id())));
  EXPECT_NE(server.log().find("--retain_terminal_jobs_days=2e-05"), std::string::npos)
      << server.log();
  v1::Job r;
  ASSERT_TRUE(jobs.Get(running.name(), &r).ok());  // running for longer than the period
  EXPECT_EQ(r.state(), v1::RUNNING);

  // DeleteJob: a running job is refused; an ended one goes with its files.
  EXPECT_EQ(jobs.Delete(running.name()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(jobs.Cancel(running.name()).ok());
  ASSERT_EQ(jobs.WaitFor(running.name(), {v1::CANCELLED}), v1::CANCELLED);
  EXPECT_TRUE(AnyExists(Dirs(server.data_dir(), running.id())));  // its cancel checkpoint
  const grpc::Status deleted = jobs.Delete(running.name());
  if (deleted.ok()) {  // (retention may have taken it first)
    EXPECT_FALSE(AnyExists(Dirs(server.data_dir(), running.id())));
  } else {
    EXPECT_EQ(deleted.error_code(), grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_FALSE(AnyExists(Dirs(server.data_dir(), running.id())));
}

// The server's other operator flags: CPU pinning (--training_cpus,
// --server_cpus) and retention bounds refuse bad values at start-up, with the
// flag named; pinned, a job still trains.
TEST(ServerFlagsTest, BadCpuListsAndRetentionBoundsAreStartupErrorsAndPinnedJobsRun) {
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--training_cpus=x"},
                                              {"--server_cpus=3-1"},
                                              {"--training_cpus=0-"},
                                              {"--max_terminal_jobs=-1"},
                                              {"--retain_terminal_jobs_days=-2"},
                                              {"--ended_job_cache_mib=-1"}}) {
    AmpdProcess p(bad);
    EXPECT_FALSE(p.ok()) << bad[0];
    const std::string flag = bad[0].substr(0, bad[0].find('='));
    EXPECT_NE(p.log().find(flag), std::string::npos) << bad[0] << ": " << p.log();
  }
  AmpdProcess pinned({"--training_cpus=0", "--server_cpus=0"});
  ASSERT_TRUE(pinned.ok()) << pinned.log();
  Jobs jobs(pinned);
  const v1::Job job = jobs.Create(kShortJob);
  EXPECT_EQ(jobs.WaitFor(job.name(), {v1::SUCCEEDED}), v1::SUCCEEDED);
  EXPECT_EQ(pinned.log().find("cannot pin"), std::string::npos) << pinned.log();
}

}  // namespace
}  // namespace ampd::testing
