// Nothing lost: jobs, history and profiles survive restarts, and a job that
// was running when ampd died finishes after a restart with every step exactly
// once and the same losses as an uninterrupted run.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Client {
 public:
  explicit Client(const AmpdProcess& p)
      : training_(v1::TrainingService::NewStub(p.channel())),
        precision_(v1::PrecisionService::NewStub(p.channel())) {}

  v1::Job Create(const std::string& json) {
    grpc::ClientContext ctx;
    v1::CreateJobRequest req;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, req.mutable_spec()).ok());
    v1::Job job;
    grpc::Status s = training_->CreateJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }
  grpc::Status Get(const std::string& name, v1::Job* job) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_name(name);
    return training_->GetJob(&ctx, req, job);
  }
  // Generous: these machines are shared, and a loaded one trains slowly; a
  // wait that succeeds returns as soon as the state is reached.
  v1::Job WaitFor(const std::string& name, v1::JobState state, int timeout_ms = 240000) {
    const auto deadline = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
    v1::Job job;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Get(name, &job).ok() && job.state() == state) return job;
      std::this_thread::sleep_for(milliseconds(10));
    }
    ADD_FAILURE() << name << " never reached " << v1::JobState_Name(state) << "; it is "
                  << v1::JobState_Name(job.state());
    return job;
  }
  // Step -> loss, from a full stream; counts duplicate steps.
  // The job's own log lines (LogRecord events), in order.
  std::vector<std::string> LogLines(const std::string& name) {
    grpc::ClientContext ctx;
    v1::StreamMetricsRequest req;
    req.set_name(name);
    req.set_history_only(true);
    auto reader = training_->StreamMetrics(&ctx, req);
    std::vector<std::string> lines;
    v1::MetricsEvent e;
    while (reader->Read(&e)) {
      if (e.has_log()) lines.push_back(e.log().message());
    }
    EXPECT_TRUE(reader->Finish().ok());
    return lines;
  }
  std::map<int64_t, double> Losses(const std::string& name, int* duplicates, v1::JobState* final) {
    grpc::ClientContext ctx;
    v1::StreamMetricsRequest req;
    req.set_name(name);
    auto reader = training_->StreamMetrics(&ctx, req);
    std::map<int64_t, double> losses;
    v1::MetricsEvent e;
    *duplicates = 0;
    while (reader->Read(&e)) {
      if (e.has_step_record()) {
        if (losses.count(e.step_record().step())) ++*duplicates;
        losses[e.step_record().step()] = e.step_record().loss();
      }
      if (e.has_state()) *final = e.state().state();
    }
    EXPECT_TRUE(reader->Finish().ok());
    return losses;
  }
  std::unique_ptr<v1::TrainingService::Stub> training_;
  std::unique_ptr<v1::PrecisionService::Stub> precision_;
};

TEST(PersistenceTest, JobsHistoryAndProfilesSurviveARestart) {
  auto first = std::make_unique<AmpdProcess>();
  ASSERT_TRUE(first->ok()) << first->log();
  const std::string data_dir = first->data_dir();
  std::string done_name, cancelled_name;
  {
    Client c(*first);
    done_name = c.Create(TinyJobJson(25)).name();
    c.WaitFor(done_name, v1::SUCCEEDED);
    grpc::ClientContext ctx;
    v1::CreateProfileRequest req;
    req.set_profile_id("kept-profile");
    req.mutable_profile()->mutable_config()->set_base("bf16-mixed");
    v1::PrecisionProfile created;
    ASSERT_TRUE(c.precision_->CreateProfile(&ctx, req, &created).ok());
  }
  ASSERT_EQ(first->Stop(), 0);

  AmpdProcess second({}, data_dir);
  ASSERT_TRUE(second.ok()) << second.log();
  Client c(second);
  v1::Job job;
  ASSERT_TRUE(c.Get(done_name, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().step(), 25);
  EXPECT_EQ(job.transitions_size(), 3);
  int duplicates = 0;
  v1::JobState final = v1::JOB_STATE_UNSPECIFIED;
  auto losses = c.Losses(done_name, &duplicates, &final);
  EXPECT_EQ(losses.size(), 25u);
  EXPECT_EQ(duplicates, 0);
  EXPECT_EQ(final, v1::SUCCEEDED);
  grpc::ClientContext ctx;
  v1::GetProfileRequest get;
  get.set_name("profiles/kept-profile");
  v1::PrecisionProfile profile;
  ASSERT_TRUE(c.precision_->GetProfile(&ctx, get, &profile).ok());
  EXPECT_EQ(profile.config().base(), "bf16-mixed");
  // New jobs get fresh ids and still list newest first.
  v1::Job newer = c.Create(TinyJobJson(2));
  EXPECT_NE(newer.id(), job.id());
  grpc::ClientContext list_ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(c.training_->ListJobs(&list_ctx, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 2);
  EXPECT_EQ(list.jobs(0).id(), newer.id());
}

// Runs `spec` (`steps` steps) uninterrupted on one server, then again on a
// server killed with SIGKILL the moment its step-300 checkpoint is complete
// and restarted: the restarted run must end with every step once, the same
// losses bit for bit, and the same final weights byte for byte.
void ExpectKilledRunResumesBitwise(const std::string& spec, int steps) {
  // Reference: the same job, uninterrupted, on its own server.
  std::map<int64_t, double> reference;
  std::string reference_weights;
  {
    AmpdProcess ref;
    ASSERT_TRUE(ref.ok());
    Client c(ref);
    v1::Job job = c.Create(spec);
    int duplicates = 0;
    v1::JobState final;
    reference = c.Losses(job.name(), &duplicates, &final);
    ASSERT_EQ(final, v1::SUCCEEDED);
    reference_weights = Slurp(ref.data_dir() + "/jobs/" + job.id() + "/model.safetensors");
  }
  ASSERT_EQ(reference.size(), static_cast<size_t>(steps));
  ASSERT_GT(reference_weights.size(), 1000u);

  auto first =
      std::make_unique<AmpdProcess>(std::vector<std::string>{"--checkpoint_every_steps=100"});
  ASSERT_TRUE(first->ok());
  const std::string data_dir = first->data_dir();
  std::string name;
  {
    Client c(*first);
    v1::Job queued_behind;  // a second job, queued when the server dies
    const v1::Job created = c.Create(spec);
    name = created.name();
    queued_behind = c.Create(TinyJobJson(5));
    // Let it get well into training, then kill -9 (no chance to clean up) the
    // moment the step-300 checkpoint is complete (its checksum sidecar, written
    // last, appears): the narrowest window there is between a checkpoint and
    // the stored history it must line up with.
    const std::string third_checkpoint =
        data_dir + "/checkpoints/" + created.id() + "/step-00000300.safetensors.sha256";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (std::chrono::steady_clock::now() < deadline &&
           !std::filesystem::exists(third_checkpoint)) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    first->Kill();
    ASSERT_TRUE(std::filesystem::exists(third_checkpoint));

    AmpdProcess second({"--checkpoint_every_steps=100"}, data_dir);
    ASSERT_TRUE(second.ok()) << second.log();
    EXPECT_NE(second.log().find("\"requeued\":\"1\""), std::string::npos) << second.log();
    // It continued from a checkpoint, not from step 0 (logged while recovering, before
    // "listening"; a checkpoint is only written once the stored history reaches its step, so
    // the kill cannot leave one that recovery must discard).
    EXPECT_NE(second.log().find("resuming from checkpoint"), std::string::npos) << second.log();
    Client c2(second);
    v1::Job resumed = c2.WaitFor(name, v1::SUCCEEDED);
    EXPECT_EQ(resumed.progress().step(), steps);
    int duplicates = -1;
    v1::JobState final = v1::JOB_STATE_UNSPECIFIED;
    std::map<int64_t, double> losses = c2.Losses(name, &duplicates, &final);
    EXPECT_EQ(final, v1::SUCCEEDED);
    EXPECT_EQ(duplicates, 0);
    ASSERT_EQ(losses.size(), static_cast<size_t>(steps));
    for (const auto& [step, loss] : reference) {
      ASSERT_EQ(losses[step], loss) << "step " << step;  // bitwise: same deterministic run
    }
    EXPECT_EQ(c2.WaitFor(queued_behind.name(), v1::SUCCEEDED).state(), v1::SUCCEEDED);
    // The final weights equal the uninterrupted run's, byte for byte.
    EXPECT_EQ(Slurp(data_dir + "/jobs/" + resumed.id() + "/model.safetensors"), reference_weights);
  }
}

TEST(PersistenceTest, AJobRunningWhenAmpdIsKilledFinishesAfterRestartWithIdenticalLosses) {
  ExpectKilledRunResumesBitwise(TinyJobJson(1500, "32-true", 3), 1500);
}

// The same with 8-bit AdamW states: codes, absmax values and maps come back
// from the checkpoint exactly.
TEST(PersistenceTest, AJobWith8BitOptimizerStatesResumesBitwiseAfterSigkill) {
  ExpectKilledRunResumesBitwise(R"({"model": {"mlp": {"hidden": [64]}},
    "data": {"synthetic": {"numExamples": 512, "featureDim": 8, "numClasses": 3,
                           "numTestExamples": 128, "seed": 7}},
    "optimizer": {"adamw": {"stateBits": 8}, "min8bitSize": "64"},
    "precision": {"profile": "16-mixed"},
    "training": {"steps": "1500", "batchSize": 32, "evalInterval": 100, "seed": "5"}})",
                                1500);
}

// The same for a GPT on the built-in corpus: the windows drawn resume from
// the checkpoint's position, dropout masks from the step.
TEST(PersistenceTest, AGptJobKilledMidRunFinishesAfterRestartBitwiseEqual) {
  ExpectKilledRunResumesBitwise(R"({"model": {"gpt": {"blockSize": "16", "nLayer": "1",
      "nHead": "2", "nEmbd": "32", "dropout": 0.1}},
    "data": {"tokens": {"builtin": "fortunes", "evalWindows": "8"}},
    "optimizer": {"lr": 0.003, "weightDecay": 0.1},
    "schedule": {"kind": "KIND_WARMUP_COSINE", "warmupSteps": "20"},
    "precision": {"profile": "bf16-mixed"},
    "training": {"steps": "600", "batchSize": "4", "evalInterval": "50", "clipNorm": 1.0,
                 "seed": "9"}})",
                                600);
}

// The same for a CNN with batch norm on fashion-mnist's images with
// augmentation: the running statistics come back from the checkpoint, and
// every example's crop, flip and erased box from (seed, epoch, example).
TEST(PersistenceTest, AnAugmentedCnnJobKilledMidRunFinishesAfterRestartBitwiseEqual) {
  ExpectKilledRunResumesBitwise(R"({"model": {"sequential": {"layers": [
      {"conv2d": {"outChannels": "4", "kernelSize": ["3"], "stride": ["2"]}},
      {"batchNorm2d": {}}, {"activation": "ACTIVATION_RELU"},
      {"maxPool2d": {"kernelSize": ["2"]}}, {"flatten": {}},
      {"linear": {"outFeatures": "10"}}]}},
    "data": {"builtin": "fashion-mnist", "normalize": {"mean": [0.286], "std": [0.353]},
             "augment": {"randomCropPadding": "2", "horizontalFlip": true,
                         "randomErasing": 0.25}},
    "optimizer": {"lr": 0.003},
    "precision": {"profile": "bf16-mixed"},
    "training": {"steps": "600", "batchSize": "16", "evalInterval": "200", "seed": "4"}})",
                                600);
}

TEST(PersistenceTest, ACorruptLatestCheckpointFallsBackToThePreviousOne) {
  const std::vector<std::string> flags = {"--checkpoint_every_steps=100", "--keep_checkpoints=3"};
  auto first = std::make_unique<AmpdProcess>(flags);
  ASSERT_TRUE(first->ok());
  const std::string data_dir = first->data_dir();
  Client c(*first);
  v1::Job job = c.Create(TinyJobJson(1000, "32-true", 5));
  v1::Job now;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (std::chrono::steady_clock::now() < deadline) {
    if (c.Get(job.name(), &now).ok() && now.progress().step() >= 450) break;
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_LT(now.progress().step(), 1000);
  first->Kill();
  // Corrupt the newest checkpoint (one flipped byte in its data).
  const std::string dir = data_dir + "/checkpoints/" + job.id();
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (p.size() > 12 && p.compare(p.size() - 12, 12, ".safetensors") == 0 && p > newest)
      newest = p;
  }
  ASSERT_FALSE(newest.empty());
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char b;
    f.read(&b, 1);
    f.seekp(-100, std::ios::end);
    b ^= 0x40;
    f.write(&b, 1);
  }
  AmpdProcess second(flags, data_dir);
  ASSERT_TRUE(second.ok());
  const std::string log = second.log();
  EXPECT_NE(log.find("unusable checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find("resuming from checkpoint"), std::string::npos) << log;
  Client c2(second);
  EXPECT_EQ(c2.WaitFor(job.name(), v1::SUCCEEDED).state(), v1::SUCCEEDED);
  int duplicates = -1;
  v1::JobState final;
  EXPECT_EQ(c2.Losses(job.name(), &duplicates, &final).size(), 1000u);
  EXPECT_EQ(duplicates, 0);
  // The job's own log says what happened (ampctl logs shows these lines).
  const std::vector<std::string> lines = c2.LogLines(job.name());
  auto has = [&](const std::string& text) {
    for (const std::string& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("unusable checkpoint: ")) << ::testing::PrintToString(lines);
  EXPECT_TRUE(
      has("ampd restarted while the job was running; it resumes from its checkpoint of "
          "step "))
      << ::testing::PrintToString(lines);
  EXPECT_TRUE(has("(resuming from the checkpoint of step ")) << ::testing::PrintToString(lines);
  EXPECT_TRUE(has("checkpoint at step 100 written: ")) << ::testing::PrintToString(lines);
}

TEST(PersistenceTest, AStorageFailureFailsOnlyThatJobAndTheServerKeepsServing) {
  AmpdProcess server({"--checkpoint_every_steps=10"});
  ASSERT_TRUE(server.ok());
  Client c(server);
  v1::Job blocker = c.Create(TinyJobJson(1000000));
  c.WaitFor(blocker.name(), v1::RUNNING);
  v1::Job victim = c.Create(TinyJobJson(50));
  // Its checkpoint directory cannot be created: a file is in the way.
  std::filesystem::create_directories(server.data_dir() + "/checkpoints");
  { std::ofstream(server.data_dir() + "/checkpoints/" + victim.id()) << "in the way"; }
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_name(blocker.name());
  v1::Job ignored;
  ASSERT_TRUE(c.training_->CancelJob(&ctx, cancel, &ignored).ok());
  v1::Job failed = c.WaitFor(victim.name(), v1::FAILED);
  EXPECT_NE(failed.failure_reason().find("storage error"), std::string::npos)
      << failed.failure_reason();
  EXPECT_NE(failed.failure_reason().find(victim.id()), std::string::npos)
      << failed.failure_reason();
  v1::Job fine = c.Create(TinyJobJson(20));
  EXPECT_EQ(c.WaitFor(fine.name(), v1::SUCCEEDED).state(), v1::SUCCEEDED);
  // Successful jobs leave their weights and TensorBoard logs.
  EXPECT_TRUE(
      std::filesystem::exists(server.data_dir() + "/jobs/" + fine.id() + "/model.safetensors"));
  bool events = false;
  for (const auto& e :
       std::filesystem::directory_iterator(server.data_dir() + "/tensorboard/" + fine.id())) {
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events);
}

TEST(PersistenceTest, GracefulShutdownRequeuesRunningJobsWhichResumeOnRestart) {
  constexpr int kSteps = 20000;
  auto first = std::make_unique<AmpdProcess>();
  ASSERT_TRUE(first->ok());
  const std::string data_dir = first->data_dir();
  std::string name;
  {
    Client c(*first);
    // Long enough to be still running when the server stops: 1500 steps
    // took 72 ms on a fast core, done before the graceful stop began.
    name = c.Create(TinyJobJson(kSteps)).name();
    c.WaitFor(name, v1::RUNNING);
  }
  ASSERT_EQ(first->Stop(), 0);
  AmpdProcess second({}, data_dir);
  ASSERT_TRUE(second.ok()) << second.log();
  Client c(second);
  v1::Job done = c.WaitFor(name, v1::SUCCEEDED);
  bool saw_requeue = false;
  for (const auto& t : done.transitions()) {
    saw_requeue |=
        t.state() == v1::QUEUED && t.reason().find("resumes on restart") != std::string::npos;
  }
  EXPECT_TRUE(saw_requeue) << done.DebugString();
  int duplicates = -1;
  v1::JobState final;
  EXPECT_EQ(c.Losses(name, &duplicates, &final).size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(duplicates, 0);
}

TEST(PersistenceTest, AnUnusableDataDirIsAClearStartupError) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string file = std::string(tmp ? tmp : "/tmp") + "/not_a_dir";
  { std::ofstream(file) << "x"; }
  AmpdProcess p({}, file + "/sub");
  EXPECT_FALSE(p.ok());
}

}  // namespace
}  // namespace ampd::testing
