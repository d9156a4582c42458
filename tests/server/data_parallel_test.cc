// Data-parallel jobs through the server (resources.workers): rank 0 trains in
// ampd and the other ranks in `ampd worker` processes it starts. The job
// trains as one worker with the same global batch would (its dropout masks
// included); it is placed all or nothing (FAILED_PRECONDITION when it could
// never fit, QUEUED saying what it waits for when it must wait); a worker
// killed mid-job restarts every rank from the last checkpoint, and the job
// ends with each step once in its history and the weights of an
// uninterrupted run, bitwise.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"
#include "tests/server/rpc_test_util.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

const std::set<v1::JobState> kEnded = {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An MLP on synthetic data; `workers` data-parallel ranks share the global
// batch of 64. With dropout, so that the ranks' masks matter: each rank's
// samples take the masks one worker's would (ops::DropoutShardScope).
std::string DdpJobJson(int steps, int workers, const std::string& precision = "32-true",
                       const std::string& extra_resources = "") {
  return R"({"model": {"mlp": {"hidden": [32], "dropout": 0.2}},
    "data": {"synthetic": {"numExamples": 1024, "featureDim": 16, "numClasses": 4,
                           "numTestExamples": 128, "seed": 3}},
    "precision": {"profile": ")" +
         precision + R"("},
    "training": {"steps": )" +
         std::to_string(steps) + R"(, "batchSize": 64, "seed": 1},
    "resources": {"workers": )" +
         std::to_string(workers) + extra_resources + "}}";
}

struct History {
  std::map<int64_t, double> losses;  // step -> loss
  int duplicates = 0;
  std::vector<v1::StateChange> states;
  std::vector<v1::StepRecord> records;
};

History ReadHistory(v1::TrainingService::Stub* stub, const std::string& name) {
  grpc::ClientContext ctx;
  v1::StreamMetricsRequest req;
  req.set_name(name);
  req.set_history_only(true);
  auto reader = stub->StreamMetrics(&ctx, req);
  History h;
  v1::MetricsEvent e;
  while (reader->Read(&e)) {
    if (e.has_step_record()) {
      h.records.push_back(e.step_record());
      h.duplicates += h.losses.count(e.step_record().step());
      h.losses[e.step_record().step()] = e.step_record().loss();
    }
    if (e.has_state()) h.states.push_back(e.state());
  }
  EXPECT_TRUE(reader->Finish().ok());
  return h;
}

// The `ampd worker` children of the server process.
std::vector<pid_t> WorkerPids(pid_t server) { return WorkerChildren(server); }

bool HasState(const History& h, v1::JobState state, const std::string& reason_part,
              std::string* reason = nullptr) {
  for (const v1::StateChange& s : h.states) {
    if (s.state() == state && s.reason().find(reason_part) != std::string::npos) {
      if (reason != nullptr) *reason = s.reason();
      return true;
    }
  }
  return false;
}

class DataParallelTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    server_ = std::make_unique<AmpdProcess>(std::move(flags));
    ASSERT_TRUE(server_->ok()) << server_->log();
    stub_ = v1::TrainingService::NewStub(server_->channel());
  }
  v1::Job RunToEnd(const std::string& json) {
    v1::Job job = CreateJob(stub_.get(), json);
    EXPECT_FALSE(job.name().empty());
    return WaitForState(stub_.get(), job.name(), kEnded, milliseconds(240000));
  }
  // The job's one worker process once the job is past `step` (-1, and a
  // failure, if the job ends or never gets there).
  pid_t WorkerPastStep(const std::string& name, int64_t step) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      const v1::Job now = GetJob(stub_.get(), name);
      const std::vector<pid_t> pids = WorkerPids(server_->pid());
      if (now.progress().step() >= step && pids.size() == 1) return pids[0];
      if (kEnded.count(now.state())) break;
      std::this_thread::sleep_for(milliseconds(2));
    }
    ADD_FAILURE() << name << " ended or never passed step " << step << " with one worker";
    return -1;
  }
  std::string Weights(const v1::Job& job) {
    return Slurp(server_->data_dir() + "/jobs/" + job.id() + "/model.safetensors");
  }

  std::unique_ptr<AmpdProcess> server_;
  std::unique_ptr<v1::TrainingService::Stub> stub_;
};

TEST_F(DataParallelTest, TwoWorkersTrainAsOneWithTheSameGlobalBatch) {
  Start({"--cpu_workers=2"});
  const v1::Job two = RunToEnd(DdpJobJson(60, 2));
  ASSERT_EQ(two.state(), v1::SUCCEEDED) << two.failure_reason() << server_->LogTail();
  const v1::Job one = RunToEnd(DdpJobJson(60, 1));
  ASSERT_EQ(one.state(), v1::SUCCEEDED) << one.failure_reason();
  const History h2 = ReadHistory(stub_.get(), two.name());
  const History h1 = ReadHistory(stub_.get(), one.name());
  ASSERT_EQ(h2.losses.size(), 60u);
  ASSERT_EQ(h1.losses.size(), 60u);
  EXPECT_EQ(h2.duplicates, 0);
  double worst = 0;
  for (const auto& [step, loss] : h1.losses) {
    worst = std::max(worst, std::abs(h2.losses.at(step) - loss) / std::abs(loss));
  }
  // The ranks sum their halves' gradients in another order: rounding only.
  EXPECT_LT(worst, 1e-5) << "worst relative loss difference over 60 steps";
  // The stream's worker figures: the all-reduce of every step of two workers,
  // none for one.
  for (const v1::StepRecord& r : h2.records) {
    EXPECT_EQ(r.workers(), 2) << r.step();
    EXPECT_GT(r.allreduce_seconds(), 0) << r.step();
    EXPECT_GE(r.allreduce_hidden(), 0) << r.step();
    EXPECT_LE(r.allreduce_hidden(), 1) << r.step();
    ASSERT_EQ(r.worker_samples_per_s_size(), 2) << r.step();
    EXPECT_GT(r.worker_samples_per_s(0), 0) << r.step();
    EXPECT_GT(r.worker_samples_per_s(1), 0) << r.step();
  }
  std::string events;  // and TensorBoard's
  for (const auto& f : std::filesystem::recursive_directory_iterator(server_->data_dir() +
                                                                     "/tensorboard/" + two.id())) {
    if (f.is_regular_file()) events += Slurp(f.path().string());
  }
  EXPECT_NE(events.find("ddp/allreduce_ms"), std::string::npos);
  EXPECT_NE(events.find("ddp/allreduce_hidden"), std::string::npos);
  EXPECT_NE(events.find("ddp/worker1_samples_per_s"), std::string::npos);
  EXPECT_EQ(h1.records.back().workers(), 0);
  EXPECT_EQ(h1.records.back().allreduce_seconds(), 0);
  // The ranks' processes are gone with the job, and a second run of the
  // same 2-worker job is bitwise the first.
  EXPECT_TRUE(WorkerPids(server_->pid()).empty());
  const v1::Job again = RunToEnd(DdpJobJson(60, 2));
  ASSERT_EQ(again.state(), v1::SUCCEEDED) << again.failure_reason();
  EXPECT_FALSE(Weights(two).empty());
  EXPECT_EQ(Weights(again), Weights(two));
}

TEST_F(DataParallelTest, TheExampleTrainsOnFashionMnistWithTwoWorkers) {
  Start({"--cpu_workers=2"});
  std::string json = Slurp(Runfile("examples/fashion_mlp_bf16_2workers.json"));
  const size_t epochs = json.find("\"epochs\": 2");
  ASSERT_NE(epochs, std::string::npos);
  json.replace(epochs, 11, "\"steps\": 30");  // a short look, as the README's
  const v1::Job job = RunToEnd(json);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.failure_reason() << server_->LogTail();
  EXPECT_EQ(job.spec().resources().workers(), 2);
  const History h = ReadHistory(stub_.get(), job.name());
  EXPECT_EQ(h.losses.size(), 30u);
  EXPECT_LT(h.losses.rbegin()->second, h.losses.begin()->second);
}

TEST_F(DataParallelTest, AGptTrainsDataParallelOnTheBuiltInCorpus) {
  Start({"--cpu_workers=2"});
  const auto gpt = [](int workers) {
    return R"({"model": {"gpt": {"blockSize": "16", "nLayer": "1", "nHead": "2", "nEmbd": "32",
                           "dropout": 0.2}},
      "data": {"tokens": {"builtin": "fortunes", "evalWindows": "8"}},
      "optimizer": {"lr": 0.003},
      "training": {"steps": "20", "batchSize": "8", "evalInterval": "10", "seed": "4"},
      "resources": {"workers": )" +
           std::to_string(workers) + "}}";
  };
  const v1::Job two = RunToEnd(gpt(2));
  ASSERT_EQ(two.state(), v1::SUCCEEDED) << two.failure_reason() << server_->LogTail();
  const v1::Job one = RunToEnd(gpt(1));
  ASSERT_EQ(one.state(), v1::SUCCEEDED) << one.failure_reason();
  const History h2 = ReadHistory(stub_.get(), two.name());
  const History h1 = ReadHistory(stub_.get(), one.name());
  ASSERT_EQ(h2.losses.size(), 20u);
  double worst = 0;
  for (const auto& [step, loss] : h1.losses) {
    worst = std::max(worst, std::abs(h2.losses.at(step) - loss) / std::abs(loss));
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(h2.records.back().workers(), 2);
  EXPECT_GT(h2.records.back().tokens_per_s(), 0);
}

TEST_F(DataParallelTest, AJobThatCanNeverFitIsRefusedAndOneThatMustWaitSaysWhy) {
  Start({"--cpu_workers=2", "--heartbeat_interval_ms=50"});
  v1::Job refused;
  grpc::Status too_big = TryCreateJob(stub_.get(), DdpJobJson(10, 4), &refused);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(too_big.error_message().find("2 worker slots"), std::string::npos)
      << too_big.error_message();

  // One slot taken by a long job: the 2-worker job waits, and says for what.
  const v1::Job blocker = CreateJob(stub_.get(), TinyJobJson(100000000));
  WaitForState(stub_.get(), blocker.name(), {v1::RUNNING});
  const v1::Job waiting = CreateJob(stub_.get(), DdpJobJson(20, 2));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::StreamMetricsRequest req;
    req.set_name(waiting.name());
    auto reader = stub_->StreamMetrics(&ctx, req);
    v1::MetricsEvent e;
    std::string said;
    while (said.empty() && reader->Read(&e)) {
      if (e.has_heartbeat()) said = e.heartbeat().waiting_for();
    }
    ctx.TryCancel();
    EXPECT_EQ(said, "2 worker slots (1 free of 2)");
  }
  EXPECT_EQ(GetJob(stub_.get(), waiting.name()).state(), v1::QUEUED);
  {
    // GetCapabilities lists the server's slots, one taken.
    auto precision = v1::PrecisionService::NewStub(server_->channel());
    grpc::ClientContext ctx;
    v1::Capabilities caps;
    ASSERT_TRUE(precision->GetCapabilities(&ctx, v1::GetCapabilitiesRequest(), &caps).ok());
    ASSERT_EQ(caps.workers_size(), 1);
    EXPECT_EQ(caps.workers(0).host(), "local");
    EXPECT_EQ(caps.workers(0).slots(), 2);
    EXPECT_EQ(caps.workers(0).free(), 1);
  }
  CancelJob(stub_.get(), blocker.name());
  const v1::Job done = WaitForState(stub_.get(), waiting.name(), kEnded, milliseconds(240000));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
}

TEST_F(DataParallelTest, AKilledWorkerRestartsEveryRankFromTheCheckpointAndNothingIsLost) {
  Start({"--cpu_workers=2", "--checkpoint_every_steps=50", "--checkpoint_every_seconds=0"});
  constexpr int kSteps = 1500;
  const v1::Job reference = RunToEnd(DdpJobJson(kSteps, 2));
  ASSERT_EQ(reference.state(), v1::SUCCEEDED) << reference.failure_reason();

  const v1::Job job = CreateJob(stub_.get(), DdpJobJson(kSteps, 2));
  // Past a checkpoint, then kill rank 1.
  const pid_t worker = WorkerPastStep(job.name(), 120);
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const v1::Job done = WaitForState(stub_.get(), job.name(), kEnded, milliseconds(240000));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << server_->LogTail();

  const History h = ReadHistory(stub_.get(), job.name());
  std::string why;
  EXPECT_TRUE(HasState(h, v1::RESTARTING, "was killed by signal 9", &why));
  EXPECT_NE(why.find("worker 1"), std::string::npos) << why;
  EXPECT_NE(why.find("from the checkpoint of step"), std::string::npos) << why;
  EXPECT_TRUE(HasState(h, v1::RUNNING, "restarted"));
  EXPECT_EQ(h.duplicates, 0);
  EXPECT_EQ(h.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(Weights(done), Weights(reference)) << "the restarted job's weights differ";
  const History ref = ReadHistory(stub_.get(), reference.name());
  EXPECT_EQ(h.losses, ref.losses);
}

// ampd itself killed mid-job: its workers die with it (no orphans), and the
// restarted server resumes the job on all its ranks from the checkpoint.
TEST_F(DataParallelTest, AKilledServerTakesItsWorkersAlongAndResumesTheJob) {
  const std::vector<std::string> flags = {"--cpu_workers=2", "--checkpoint_every_steps=50",
                                          "--checkpoint_every_seconds=0"};
  Start(flags);
  constexpr int kSteps = 1500;
  const v1::Job reference = RunToEnd(DdpJobJson(kSteps, 2));
  ASSERT_EQ(reference.state(), v1::SUCCEEDED) << reference.failure_reason();
  const std::string reference_weights = Weights(reference);
  const std::map<int64_t, double> reference_losses =
      ReadHistory(stub_.get(), reference.name()).losses;

  const v1::Job job = CreateJob(stub_.get(), DdpJobJson(kSteps, 2));
  const pid_t worker = WorkerPastStep(job.name(), 120);
  ASSERT_GT(worker, 0);
  const std::string data_dir = server_->data_dir();
  server_->Kill();
  // The worker follows within moments (PR_SET_PDEATHSIG).
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = kill(worker, 0) != 0;
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(gone) << "worker " << worker << " outlived its server";

  server_ = std::make_unique<AmpdProcess>(flags, data_dir);
  ASSERT_TRUE(server_->ok()) << server_->log();
  stub_ = v1::TrainingService::NewStub(server_->channel());
  const v1::Job done = WaitForState(stub_.get(), job.name(), kEnded, milliseconds(240000));
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << server_->LogTail();
  const History h = ReadHistory(stub_.get(), job.name());
  EXPECT_EQ(h.duplicates, 0);
  EXPECT_EQ(h.losses, reference_losses);
  EXPECT_EQ(Weights(done), reference_weights);
}

TEST_F(DataParallelTest, WithoutRestartsLeftTheJobFailsNamingTheWorker) {
  Start({"--cpu_workers=2"});
  const v1::Job job =
      CreateJob(stub_.get(), DdpJobJson(100000000, 2, "32-true", R"(, "maxRestarts": 0)"));
  const pid_t worker = WorkerPastStep(job.name(), 5);
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const v1::Job done = WaitForState(stub_.get(), job.name(), kEnded, milliseconds(60000));
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_NE(done.failure_reason().find("worker 1"), std::string::npos) << done.failure_reason();
  EXPECT_NE(done.failure_reason().find("gave up after 0 restarts"), std::string::npos)
      << done.failure_reason();
}

}  // namespace
}  // namespace ampd::testing
