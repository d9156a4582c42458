// `ampd agent`: another machine's worker slots lent to a server. Here the
// "other machine" is a separate agent process with a data dir of its own,
// over loopback, authenticated with a token of role `agent`. It runs rank 1
// of a 2-worker job whose rank 0 trains in the server: the job trains as one
// worker with the same global batch would, a rank killed on the agent
// restarts the job from a checkpoint the agent fetches, and an agent without
// a valid identity is refused.
#include <signal.h>

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

#include "ampd/v1/agent_service.grpc.pb.h"
#include "ampd/v1/artifact_service.grpc.pb.h"
#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "engine/io/sha256.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"
#include "tests/server/rpc_test_util.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

const std::set<v1::JobState> kEnded = {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED};

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Sha256Hex(const std::string& text) {
  engine::io::Sha256 sha;
  sha.Update(text);
  return sha.FinishHex();
}

// The MLP of the data-parallel tests; `workers` ranks share a global batch of 64.
std::string DdpJobJson(int steps, int workers, int batch = 64) {
  return R"({"model": {"mlp": {"hidden": [32]}},
    "data": {"synthetic": {"numExamples": 1024, "featureDim": 16, "numClasses": 4,
                           "numTestExamples": 128, "seed": 3}},
    "precision": {"profile": "32-true"},
    "training": {"steps": )" +
         std::to_string(steps) + R"(, "batchSize": )" + std::to_string(batch) + R"(, "seed": 1},
    "resources": {"workers": )" +
         std::to_string(workers) + "}}";
}

// A numeric CSV (label first, 8 features) with a rule an MLP learns.
std::string CsvData(int rows) {
  std::string csv = "label,f0,f1,f2,f3,f4,f5,f6,f7\n";
  for (int i = 0; i < rows; ++i) {
    double x[8];
    for (int j = 0; j < 8; ++j) x[j] = ((i * 37 + j * 11 + i * j) % 101) / 50.0 - 1.0;
    csv += std::to_string((x[0] + x[3] - x[5] > 0) ? 1 : 0);
    for (double v : x) csv += "," + std::to_string(v);
    csv += "\n";
  }
  return csv;
}

std::string CsvJobJson(int steps, int workers) {
  return R"({"model": {"mlp": {"hidden": [16]}},
    "data": {"file": {"format": "FORMAT_CSV", "trainCsv": "uploads/ddp/train.csv"}},
    "precision": {"profile": "32-true"},
    "training": {"steps": )" +
         std::to_string(steps) + R"(, "batchSize": 32, "seed": 5},
    "resources": {"workers": )" +
         std::to_string(workers) + "}}";
}

// Calls with a bearer token.
class Caller {
 public:
  Caller(std::shared_ptr<grpc::Channel> channel, std::string token)
      : token_(std::move(token)),
        training(v1::TrainingService::NewStub(channel)),
        precision(v1::PrecisionService::NewStub(channel)),
        agent(v1::AgentService::NewStub(channel)),
        artifacts(v1::ArtifactService::NewStub(channel)) {}

  std::unique_ptr<grpc::ClientContext> Ctx() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx->AddMetadata("authorization", "Bearer " + token_);
    return ctx;
  }
  v1::Job Create(const std::string& json) {
    v1::CreateJobRequest req;
    *req.mutable_spec() = ParseSpec(json);
    v1::Job job;
    const grpc::Status s = training->CreateJob(Ctx().get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }
  v1::Job Get(const std::string& name) {
    v1::GetJobRequest req;
    req.set_name(name);
    v1::Job job;
    EXPECT_TRUE(training->GetJob(Ctx().get(), req, &job).ok());
    return job;
  }
  v1::Job WaitEnded(const std::string& name) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    v1::Job job;
    while (std::chrono::steady_clock::now() < deadline) {
      job = Get(name);
      if (kEnded.count(job.state())) return job;
      std::this_thread::sleep_for(milliseconds(20));
    }
    ADD_FAILURE() << name << " did not end in time";
    return job;
  }
  v1::Job Run(const std::string& json) { return WaitEnded(Create(json).name()); }
  struct History {
    std::map<int64_t, double> losses;
    int duplicates = 0;
    std::vector<v1::StateChange> states;
  };
  History Read(const std::string& name) {
    v1::StreamMetricsRequest req;
    req.set_name(name);
    req.set_history_only(true);
    auto ctx = Ctx();
    auto reader = training->StreamMetrics(ctx.get(), req);
    History h;
    v1::MetricsEvent e;
    while (reader->Read(&e)) {
      if (e.has_step_record()) {
        h.duplicates += h.losses.count(e.step_record().step());
        h.losses[e.step_record().step()] = e.step_record().loss();
      }
      if (e.has_state()) h.states.push_back(e.state());
    }
    EXPECT_TRUE(reader->Finish().ok());
    return h;
  }
  grpc::Status Upload(const std::string& path, const std::string& data) {
    auto ctx = Ctx();
    v1::UploadedDataset out;
    auto w = artifacts->UploadDataset(ctx.get(), &out);
    v1::UploadDatasetRequest m;
    m.mutable_header()->set_path(path);
    m.mutable_header()->set_size_bytes(static_cast<int64_t>(data.size()));
    m.mutable_header()->set_sha256(Sha256Hex(data));
    w->Write(m);
    m.Clear();
    m.set_chunk(data);
    w->Write(m);
    w->WritesDone();
    return w->Finish();
  }
  std::vector<v1::WorkerSlots> Slots() {
    v1::Capabilities caps;
    EXPECT_TRUE(precision->GetCapabilities(Ctx().get(), {}, &caps).ok());
    return {caps.workers().begin(), caps.workers().end()};
  }

 private:
  std::string token_;

 public:
  std::unique_ptr<v1::TrainingService::Stub> training;
  std::unique_ptr<v1::PrecisionService::Stub> precision;
  std::unique_ptr<v1::AgentService::Stub> agent;
  std::unique_ptr<v1::ArtifactService::Stub> artifacts;
};

class AgentTest : public ::testing::Test {
 protected:
  void StartServer(std::vector<std::string> flags) {
    const std::string tokens = TmpDir() + "/agent_tokens.txt";
    std::ofstream(tokens) << Sha256Hex("root-token") << " root admin\n"
                          << Sha256Hex("alice-token") << " alice user\n"
                          << Sha256Hex("agent-token") << " rack-7 agent\n";
    flags.push_back("--tokens_file=" + tokens);
    server_ = std::make_unique<AmpdProcess>(std::move(flags));
    ASSERT_TRUE(server_->ok()) << server_->error();
    root_ = std::make_unique<Caller>(server_->channel(), "root-token");
  }
  std::unique_ptr<AgentProcess> StartAgent(const std::string& name, const std::string& token,
                                           int slots = 1) {
    agent_dir_ = TmpDir() + "/agent-" + name;
    return std::make_unique<AgentProcess>(
        std::vector<std::string>{"--server=" + server_->address(), "--name=" + name,
                                 "--slots=" + std::to_string(slots), "--data_dir=" + agent_dir_,
                                 "--reconnect_ms=0"},
        std::map<std::string, std::string>{{"AMPD_TOKEN", token}});
  }
  // Waits until GetCapabilities lists the agent with `free` free slots.
  bool Listed(const std::string& name, int slots, int free, const std::string& kind = "agent:") {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      for (const v1::WorkerSlots& w : root_->Slots()) {
        if (w.host() == kind + name && w.slots() == slots && w.free() == free) return true;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }
  std::string Weights(const v1::Job& job) {
    return Slurp(server_->data_dir() + "/jobs/" + job.id() + "/model.safetensors");
  }

  std::unique_ptr<AmpdProcess> server_;
  std::unique_ptr<Caller> root_;
  std::string agent_dir_;
};

bool HasState(const Caller::History& h, v1::JobState state, const std::string& part,
              std::string* reason) {
  for (const v1::StateChange& s : h.states) {
    if (s.state() == state && s.reason().find(part) != std::string::npos) {
      *reason = s.reason();
      return true;
    }
  }
  return false;
}

TEST_F(AgentTest, AnAgentRunsOneOfTwoWorkersAndAKilledRankRestartsFromACheckpoint) {
  // One local slot (rank 0's): rank 1 can only run on the agent.
  StartServer({"--cpu_workers=1", "--checkpoint_every_steps=50", "--checkpoint_every_seconds=0"});
  std::unique_ptr<AgentProcess> agent = StartAgent("rack-7-b", "agent-token");
  ASSERT_TRUE(Listed("rack-7-b", 1, 1)) << agent->log() << server_->LogTail();

  constexpr int kSteps = 1500;
  const v1::Job one = root_->Run(DdpJobJson(kSteps, 1));
  ASSERT_EQ(one.state(), v1::SUCCEEDED) << one.failure_reason();
  const v1::Job two = root_->Run(DdpJobJson(kSteps, 2));
  ASSERT_EQ(two.state(), v1::SUCCEEDED)
      << two.failure_reason() << server_->LogTail() << agent->log();
  // Rank 1 ran on the agent, in its data dir, not in the server's.
  EXPECT_NE(Slurp(agent_dir_ + "/jobs/" + two.id() + "/workers/worker-1.log").find("worker 1 of 2"),
            std::string::npos)
      << agent->log();
  EXPECT_FALSE(
      std::filesystem::exists(server_->data_dir() + "/jobs/" + two.id() + "/workers/worker-1.log"));
  EXPECT_TRUE(Listed("rack-7-b", 1, 1)) << "the agent's slot is free again";

  // The issue's equivalence: the ranks sum their halves' gradients in another
  // order, so the difference is rounding.
  const Caller::History h1 = root_->Read(one.name());
  const Caller::History h2 = root_->Read(two.name());
  ASSERT_EQ(h1.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(h2.losses.size(), static_cast<size_t>(kSteps));
  double first20 = 0, all = 0;
  for (const auto& [step, loss] : h1.losses) {
    const double d = std::abs(h2.losses.at(step) - loss) / std::abs(loss);
    if (step <= 20) first20 = std::max(first20, d);
    all = std::max(all, d);
  }
  EXPECT_LT(first20, 1e-5);
  EXPECT_LT(all, 1e-3);

  // Kill rank 1 on the agent past a checkpoint: every rank restarts from it,
  // the agent's rank from the checkpoint it fetches from the server.
  const v1::Job job = root_->Create(DdpJobJson(kSteps, 2));
  pid_t worker = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (worker < 0 && std::chrono::steady_clock::now() < deadline) {
    const v1::Job now = root_->Get(job.name());
    const std::vector<pid_t> pids = WorkerChildren(agent->pid());
    if (now.progress().step() >= 120 && pids.size() == 1) worker = pids[0];
    if (kEnded.count(now.state())) break;
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_GT(worker, 0) << "the job ended or never passed step 120 with its rank on the agent";
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const v1::Job done = root_->WaitEnded(job.name());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << agent->log();
  const Caller::History h = root_->Read(job.name());
  std::string why;
  EXPECT_TRUE(HasState(h, v1::RESTARTING, "on agent rack-7-b", &why)) << agent->log();
  EXPECT_NE(why.find("killed by signal 9"), std::string::npos) << why;
  EXPECT_NE(why.find("from the checkpoint of step"), std::string::npos) << why;
  EXPECT_NE(agent->log().find("resuming at step"), std::string::npos) << agent->log();
  EXPECT_EQ(h.duplicates, 0);
  EXPECT_EQ(h.losses, h2.losses) << "the restarted job's losses differ from the uninterrupted run";
  EXPECT_FALSE(Weights(two).empty());
  EXPECT_EQ(Weights(done), Weights(two)) << "the restarted job's weights differ";

  // The README's example, rank 1 on the agent (a short look, as there).
  std::string json = Slurp(Runfile("examples/fashion_mlp_bf16_2workers.json"));
  const size_t epochs = json.find("\"epochs\": 2");
  ASSERT_NE(epochs, std::string::npos);
  json.replace(epochs, 11, "\"steps\": 30");
  const v1::Job example = root_->Run(json);
  ASSERT_EQ(example.state(), v1::SUCCEEDED) << example.failure_reason() << agent->log();
  EXPECT_EQ(root_->Read(example.name()).losses.size(), 30u);
  EXPECT_TRUE(
      std::filesystem::exists(agent_dir_ + "/jobs/" + example.id() + "/workers/worker-1.log"));
}

TEST_F(AgentTest, ALostAgentsRanksRestartOnAnotherAgent) {
  StartServer({"--cpu_workers=1", "--checkpoint_every_steps=50", "--checkpoint_every_seconds=0"});
  std::unique_ptr<AgentProcess> a = StartAgent("rack-a", "agent-token");
  const std::string dir_a = agent_dir_;
  ASSERT_TRUE(Listed("rack-a", 1, 1)) << a->log();
  std::unique_ptr<AgentProcess> b = StartAgent("rack-b", "agent-token");
  const std::string dir_b = agent_dir_;
  ASSERT_TRUE(Listed("rack-b", 1, 1)) << b->log();

  constexpr int kSteps = 1500;
  const v1::Job reference = root_->Run(DdpJobJson(kSteps, 2));
  ASSERT_EQ(reference.state(), v1::SUCCEEDED) << reference.failure_reason();

  // The whole agent goes (its rank with it, by PR_SET_PDEATHSIG) past a
  // checkpoint: the job restarts with rank 1 on the agent that is left.
  const v1::Job job = root_->Create(DdpJobJson(kSteps, 2));
  AgentProcess* first = nullptr;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (first == nullptr && std::chrono::steady_clock::now() < deadline) {
    const v1::Job now = root_->Get(job.name());
    if (now.progress().step() >= 120) {
      if (!WorkerChildren(a->pid()).empty()) first = a.get();
      if (!WorkerChildren(b->pid()).empty()) first = b.get();
    }
    if (kEnded.count(now.state())) break;
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_NE(first, nullptr) << "the job ended or never passed step 120 with its rank on an agent";
  const std::string lost_name = first == a.get() ? "rack-a" : "rack-b";
  const std::string other_dir = first == a.get() ? dir_b : dir_a;
  first->Kill();
  const v1::Job done = root_->WaitEnded(job.name());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << server_->LogTail();
  const Caller::History h = root_->Read(job.name());
  std::string why;
  EXPECT_TRUE(HasState(h, v1::RESTARTING, "from the checkpoint of step", &why));
  EXPECT_EQ(h.duplicates, 0);
  EXPECT_EQ(h.losses, root_->Read(reference.name()).losses);
  EXPECT_EQ(Weights(done), Weights(reference)) << "the restarted job's weights differ";
  EXPECT_NE(
      Slurp(other_dir + "/jobs/" + job.id() + "/workers/worker-1.log").find("resuming at step"),
      std::string::npos)
      << "rank 1 did not move to the agent that was left";
  for (const v1::WorkerSlots& w : root_->Slots()) EXPECT_NE(w.host(), "agent:" + lost_name);
}

// The agent's machine has none of the server's files: it fetches the files a
// job's spec names (here a user's upload) before starting its ranks, once
// for as long as their bytes stay the same, and only those.
TEST_F(AgentTest, TheAgentFetchesTheFilesAJobNamesOnce) {
  StartServer({"--cpu_workers=1"});
  std::unique_ptr<AgentProcess> agent = StartAgent("rack-7-c", "agent-token");
  ASSERT_TRUE(Listed("rack-7-c", 1, 1)) << agent->log();
  Caller alice(server_->channel(), "alice-token");
  const std::string csv = CsvData(512);
  const grpc::Status up = alice.Upload("ddp/train.csv", csv);
  ASSERT_TRUE(up.ok()) << up.error_message();

  const v1::Job one = alice.Run(CsvJobJson(200, 1));
  ASSERT_EQ(one.state(), v1::SUCCEEDED) << one.failure_reason();
  const v1::Job two = alice.Run(CsvJobJson(200, 2));
  ASSERT_EQ(two.state(), v1::SUCCEEDED) << two.failure_reason() << agent->log();
  EXPECT_EQ(Slurp(agent_dir_ + "/data/" + Sha256Hex(csv)), csv);
  // Rank 1 read the same examples as rank 0: the job trained as one worker.
  const Caller::History h1 = alice.Read(one.name()), h2 = alice.Read(two.name());
  ASSERT_EQ(h2.losses.size(), 200u);
  double worst = 0;
  for (const auto& [step, loss] : h1.losses) {
    worst = std::max(worst, std::abs(h2.losses.at(step) - loss) / std::abs(loss));
  }
  EXPECT_LT(worst, 1e-3);

  // While a job's rank runs on the agent, its identity fetches what the
  // spec names and nothing else.
  const v1::Job running = alice.Create(CsvJobJson(20000, 2));
  Caller as_agent(server_->channel(), "agent-token");
  auto fetch = [&](const std::string& job, const std::string& path, std::string* data) {
    v1::FetchDataFileRequest req;
    req.set_job(job);
    req.set_path(path);
    auto ctx = as_agent.Ctx();
    auto reader = as_agent.agent->FetchDataFile(ctx.get(), req);
    v1::DataFileChunk chunk;
    data->clear();
    while (reader->Read(&chunk)) *data += chunk.data();
    return reader->Finish();
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (root_->Get(running.name()).progress().step() < 5 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::string data;
  const grpc::Status ok = fetch(running.id(), "uploads/ddp/train.csv", &data);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(data, csv);
  EXPECT_EQ(fetch(running.id(), "uploads/ddp/other.csv", &data).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(fetch(running.id(), "../../ampd.db", &data).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::CancelJobRequest cancel;
  cancel.set_name(running.name());
  v1::Job cancelled;
  EXPECT_TRUE(alice.training->CancelJob(alice.Ctx().get(), cancel, &cancelled).ok());
  EXPECT_EQ(alice.WaitEnded(running.name()).state(), v1::CANCELLED);
  // Its ranks gone, the job's files are closed to the agent too.
  EXPECT_EQ(fetch(running.id(), "uploads/ddp/train.csv", &data).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Three jobs read the file; it crossed once.
  size_t fetched = 0;
  for (size_t at = agent->log().find("fetched uploads/ddp/train.csv"); at != std::string::npos;
       at = agent->log().find("fetched uploads/ddp/train.csv", at + 1)) {
    ++fetched;
  }
  EXPECT_EQ(fetched, 1u) << agent->log();
}

// `ampd agent --join=JOB` as a cluster's launcher starts it (srun here, by
// its environment): the job's ranks 1..N-1 come from the launcher's tasks.
TEST_F(AgentTest, RanksStartedByALauncherJoinTheirJob) {
  StartServer({"--cpu_workers=1"});
  std::string json = DdpJobJson(300, 3, 48);
  json.replace(json.rfind('}') - 1, 1, ", \"externalWorkers\": true}");
  const v1::Job job = root_->Create(json);
  ASSERT_FALSE(job.name().empty()) << json;
  auto task = [&](int procid, int ntasks, const std::string& join) {
    return std::make_unique<AgentProcess>(
        std::vector<std::string>{"--server=" + server_->address(), "--join=" + join,
                                 "--data_dir=" + TmpDir() + "/task-" + std::to_string(procid)},
        std::map<std::string, std::string>{{"AMPD_TOKEN", "agent-token"},
                                           {"SLURM_PROCID", std::to_string(procid)},
                                           {"SLURM_NTASKS", std::to_string(ntasks)}});
  };
  // A launcher world that does not match resources.workers (3: two tasks).
  std::unique_ptr<AgentProcess> wrong = task(0, 3, job.name());
  EXPECT_EQ(wrong->Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(wrong->log().find("INVALID_ARGUMENT"), std::string::npos) << wrong->log();
  EXPECT_NE(wrong->log().find("must start 2 tasks"), std::string::npos) << wrong->log();
  // A job behind it is not held up by the ranks it waits for; once ended,
  // it takes no more ranks.
  const v1::Job plain = root_->Create(DdpJobJson(10, 1));
  ASSERT_EQ(root_->WaitEnded(plain.name()).state(), v1::SUCCEEDED);
  std::unique_ptr<AgentProcess> late = task(0, 1, plain.name());
  EXPECT_EQ(late->Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(late->log().find("FAILED_PRECONDITION"), std::string::npos) << late->log();
  EXPECT_NE(late->log().find("has ended"), std::string::npos) << late->log();

  // One task joined: the job waits, saying for what.
  std::unique_ptr<AgentProcess> t0 = task(0, 2, job.name());
  ASSERT_TRUE(Listed(job.name() + "/rank-1", 1, 1, "joined:")) << t0->log();
  EXPECT_EQ(root_->Get(job.name()).state(), v1::QUEUED);
  // The second: the job runs, ends, and both tasks exit 0.
  std::unique_ptr<AgentProcess> t1 = task(1, 2, job.name());
  const v1::Job done = root_->WaitEnded(job.name());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << t0->log() << t1->log();
  EXPECT_EQ(t0->Wait(std::chrono::seconds(30)), 0) << t0->log();
  EXPECT_EQ(t1->Wait(std::chrono::seconds(30)), 0) << t1->log();
  EXPECT_NE(t1->log().find("as rank 2 of 3"), std::string::npos) << t1->log();
  // It trained as one worker with the same global batch.
  const v1::Job one = root_->Run(DdpJobJson(300, 1, 48));
  const Caller::History h1 = root_->Read(one.name()), h3 = root_->Read(done.name());
  ASSERT_EQ(h3.losses.size(), 300u);
  double worst = 0;
  for (const auto& [step, loss] : h1.losses) {
    worst = std::max(worst, std::abs(h3.losses.at(step) - loss) / std::abs(loss));
  }
  EXPECT_LT(worst, 1e-3);
}

TEST_F(AgentTest, AnAgentWithoutAValidIdentityIsRefused) {
  StartServer({"--cpu_workers=1"});
  // No such token: UNAUTHENTICATED, and the agent exits saying so.
  std::unique_ptr<AgentProcess> stranger = StartAgent("stranger", "no-such-token");
  EXPECT_EQ(stranger->Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(stranger->log().find("UNAUTHENTICATED"), std::string::npos) << stranger->log();
  // A user's token is an identity, but not an agent's.
  std::unique_ptr<AgentProcess> user = StartAgent("alice-laptop", "alice-token");
  EXPECT_EQ(user->Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(user->log().find("PERMISSION_DENIED"), std::string::npos) << user->log();
  for (const v1::WorkerSlots& w : root_->Slots()) EXPECT_EQ(w.host(), "local");

  // A real agent is listed; a second one under its name is refused.
  std::unique_ptr<AgentProcess> agent = StartAgent("rack-7-b", "agent-token", 2);
  ASSERT_TRUE(Listed("rack-7-b", 2, 2)) << agent->log();
  std::unique_ptr<AgentProcess> twin = StartAgent("rack-7-b", "agent-token");
  EXPECT_EQ(twin->Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(twin->log().find("ALREADY_EXISTS"), std::string::npos) << twin->log();

  // An agent's token is for lending slots only, and for the stores of the
  // jobs its ranks run.
  Caller as_agent(server_->channel(), "agent-token");
  v1::ListJobsResponse jobs;
  EXPECT_EQ(as_agent.training->ListJobs(as_agent.Ctx().get(), {}, &jobs).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::StoreGetRequest get;
  get.set_job("0123456789abcdef");
  get.set_key("ampd/rank_0");
  v1::StoreGetResponse value;
  EXPECT_EQ(as_agent.agent->StoreGet(as_agent.Ctx().get(), get, &value).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  get.set_key("../../ampd.db");
  const grpc::Status traversal = as_agent.agent->StoreGet(as_agent.Ctx().get(), get, &value);
  EXPECT_EQ(traversal.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(traversal.error_message().find("key"), std::string::npos);
  Caller alice(server_->channel(), "alice-token");
  EXPECT_EQ(alice.agent->StoreGet(alice.Ctx().get(), get, &value).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  Caller nobody(server_->channel(), "no-such-token");
  EXPECT_EQ(nobody.agent->StoreGet(nobody.Ctx().get(), get, &value).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // Placement counts the agent's slots: 3 workers fit (1 local + 2), 4 never do.
  v1::CreateJobRequest req;
  *req.mutable_spec() = ParseSpec(DdpJobJson(10, 4));
  v1::Job job;
  const grpc::Status too_big = root_->training->CreateJob(root_->Ctx().get(), req, &job);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(too_big.error_message().find("2 on its agents"), std::string::npos)
      << too_big.error_message();
  const v1::Job three = root_->Run(DdpJobJson(40, 3, 48));
  EXPECT_EQ(three.state(), v1::SUCCEEDED) << three.failure_reason() << agent->log();

  // The agent gone, its slots are gone too.
  agent->Kill();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (root_->Slots().size() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(root_->Slots().size(), 1u);
}

}  // namespace
}  // namespace ampd::testing
