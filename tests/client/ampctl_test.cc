// End-to-end tests that drive the real ampctl and ampd binaries.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "ampd/v1/artifact_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "engine/backend/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/client/tcp_proxy.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  return srcdir && ws ? std::string(srcdir) + "/" + ws + "/" + path : path;
}

std::string TmpFile(const std::string& name, const std::string& content) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::ofstream(path) << content;
  return path;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs ampctl with `args`; stdout/stderr are files (not a terminal).
Result Ampctl(const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string out = TmpFile("out" + std::to_string(counter), "");
  const std::string err = TmpFile("err" + std::to_string(counter++), "");
  pid_t pid = fork();
  if (pid == 0) {
    if (freopen(out.c_str(), "w", stdout) == nullptr ||
        freopen(err.c_str(), "w", stderr) == nullptr) {
      _exit(126);
    }
    std::vector<std::string> all = {Runfile("client/ampctl")};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
}

class AmpctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<AmpdProcess>();
    ASSERT_TRUE(server_->ok()) << server_->log();
    server_flag_ = "--server=" + server_->address();
  }
  std::string Spec(int steps) {
    return TmpFile("spec" + std::to_string(steps) + ".json", TinyJobJson(steps));
  }
  std::unique_ptr<AmpdProcess> server_;
  std::string server_flag_;
};

std::vector<int> StepLines(const std::string& out) {
  std::vector<int> steps;
  std::regex re(R"(^step\s+(\d+)/)");
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) steps.push_back(std::stoi(m[1]));
  }
  return steps;
}

TEST_F(AmpctlTest, SubmitAndWatchToCompletion) {
  Result r = Ampctl({server_flag_, "submit", Spec(40), "--watch"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("SUCCEEDED: final test accuracy"), std::string::npos) << r.out;
  std::vector<int> steps = StepLines(r.out);
  ASSERT_EQ(steps.size(), 40u) << r.out;
  for (int i = 0; i < 40; ++i) EXPECT_EQ(steps[i], i + 1);
  // On a pipe: no terminal control codes.
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(r.out.find('\r'), std::string::npos);

  Result list = Ampctl({server_flag_, "list", "--state=SUCCEEDED"});
  EXPECT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("SUCCEEDED"), std::string::npos) << list.out;
}

TEST(AmpctlDataParallelTest, WatchShowsTheWorkersAllReduce) {
  AmpdProcess server({"--cpu_workers=2"});
  ASSERT_TRUE(server.ok()) << server.log();
  std::string json = TinyJobJson(20);
  json.insert(json.rfind('}'), R"(, "resources": {"workers": 2})");
  Result r =
      Ampctl({"--server=" + server.address(), "submit", TmpFile("ddp.json", json), "--watch"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(StepLines(r.out).size(), 20u) << r.out;
  std::regex worker_line(
      R"(2 workers \[\d+ \d+ samples/s\], all-reduce \d+\.\d ms \(\d+% hidden\))");
  EXPECT_TRUE(std::regex_search(r.out, worker_line)) << r.out;
}

// Every flag as --flag=value and --flag value, -o for --output; a value flag
// at the end without its value is a usage error that names it.
TEST_F(AmpctlTest, FlagsTakeTheirValueWithOrWithoutAnEqualsSign) {
  Result submitted = Ampctl({"--server", server_->address(), "-o", "json", "submit", Spec(5),
                             "--request_id", "flags-1", "--watch"});
  ASSERT_EQ(submitted.code, 0) << submitted.out << submitted.err;
  Result got_job = Ampctl({server_flag_, "-o", "json", "submit", Spec(5), "--request_id=flags-1"});
  ASSERT_EQ(got_job.code, 0) << got_job.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(got_job.out, &job).ok()) << got_job.out;
  for (const std::vector<std::string>& form : {std::vector<std::string>{"--output", "json"},
                                               {"--output=json"},
                                               {"-o", "json"},
                                               {"-o=json"}}) {
    std::vector<std::string> args = {server_flag_, "get", job.name()};
    args.insert(args.end(), form.begin(), form.end());
    Result r = Ampctl(args);
    EXPECT_EQ(r.code, 0) << form[0] << ": " << r.err;
    v1::Job parsed;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &parsed).ok())
        << form[0] << ": " << r.out;
    EXPECT_EQ(parsed.name(), job.name());
  }
  Result list = Ampctl({server_flag_, "list", "-o", "json", "--state", "SUCCEEDED"});
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find(job.name()), std::string::npos) << list.out;
  Result table = Ampctl({"--server", server_->address(), "list", "--state", "SUCCEEDED"});
  EXPECT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find(" 5/5 "), std::string::npos) << table.out;
  Result missing = Ampctl({server_flag_, "get", job.name(), "--output"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("--output needs a value"), std::string::npos) << missing.err;
  Result bad = Ampctl({server_flag_, "get", job.name(), "-o", "yaml"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("expected table or json, got \"yaml\""), std::string::npos) << bad.err;
}

// A queued job shows its total steps at once when the spec gives them, and
// "-" while an epoch count has not become steps (the data is not loaded).
TEST_F(AmpctlTest, ListShowsTheTotalAsSoonAsItIsKnownAndADashUntilThen) {
  // The first job holds the single worker, so the next two stay queued.
  Result running = Ampctl({server_flag_, "-o", "json", "submit", Spec(1000000)});
  ASSERT_EQ(running.code, 0) << running.err;
  const std::string epochs = TmpFile("epochs.json", R"({"displayName": "by-epochs",
      "data": {"synthetic": {"numExamples": 64, "featureDim": 8, "numClasses": 2}},
      "training": {"epochs": 2, "batchSize": "16"}})");
  ASSERT_EQ(Ampctl({server_flag_, "submit", epochs}).code, 0);
  const std::string steps = TmpFile("steps.json", R"({"displayName": "by-steps",
      "data": {"synthetic": {"numExamples": 64, "featureDim": 8, "numClasses": 2}},
      "training": {"steps": "7", "batchSize": "16"}})");
  ASSERT_EQ(Ampctl({server_flag_, "submit", steps}).code, 0);
  Result list = Ampctl({server_flag_, "list", "--state", "QUEUED"});
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_TRUE(std::regex_search(list.out, std::regex(R"(QUEUED\s+\S+\s+0/-\s+-\s+by-epochs)")))
      << list.out;
  EXPECT_TRUE(std::regex_search(list.out, std::regex(R"(QUEUED\s+\S+\s+0/7\s+-\s+by-steps)")))
      << list.out;
  EXPECT_EQ(list.out.find("0/0"), std::string::npos) << list.out;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(running.out, &job).ok());
  EXPECT_EQ(Ampctl({server_flag_, "cancel", job.name()}).code, 0);
}

TEST_F(AmpctlTest, FailedJobExitsOneAndCancelledJobExitsThree) {
  const std::string bad_data = TmpFile(
      "bad_data.json", R"({"data": {"file": {"format": "FORMAT_CSV", "trainCsv": "nope.csv"}}})");
  Result failed = Ampctl({server_flag_, "submit", bad_data, "--watch"});
  EXPECT_EQ(failed.code, 1) << failed.out << failed.err;
  EXPECT_NE(failed.out.find("FAILED"), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("nope.csv"), std::string::npos) << failed.out;

  Result submitted = Ampctl({server_flag_, "--output=json", "submit", Spec(1000000)});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(submitted.out, &job).ok())
      << submitted.out;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Result c = Ampctl({server_flag_, "cancel", job.name()});
    EXPECT_EQ(c.code, 0) << c.err;
  });
  Result watched = Ampctl({server_flag_, "watch", job.name()});
  canceller.join();
  EXPECT_EQ(watched.code, 3) << watched.out << watched.err;
  EXPECT_NE(watched.out.find("CANCELLED"), std::string::npos);
}

// Cuts every connection through `proxy` three times, 400 ms apart, then
// cancels `job` directly (so that a client reading through the proxy sees
// several reconnects, then the job's end).
std::thread CutThriceThenCancel(TcpProxy* proxy, const std::string& server_flag,
                                const std::string& job) {
  return std::thread([=] {
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      proxy->CutAll();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    Result c = Ampctl({server_flag, "cancel", job});
    EXPECT_EQ(c.code, 0) << c.err;
  });
}

TEST_F(AmpctlTest, WatchReconnectsAfterTheConnectionIsCut) {
  TcpProxy proxy(server_->port());
  // A job that runs until cancelled, so the cuts land mid-stream.
  Result submitted = Ampctl({server_flag_, "--output=json", "submit", Spec(1000000)});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(submitted.out, &job).ok());
  std::thread cutter = CutThriceThenCancel(&proxy, server_flag_, job.name());
  Result r = Ampctl({"--server=127.0.0.1:" + std::to_string(proxy.port()), "watch", job.name()});
  cutter.join();
  EXPECT_EQ(r.code, 3) << r.err;  // cancelled, seen through the reconnected stream
  EXPECT_GE(proxy.connections_accepted(), 2);
  EXPECT_NE(r.out.find("connection lost"), std::string::npos) << r.err;
  std::vector<int> steps = StepLines(r.out);
  ASSERT_GT(steps.size(), 10u);
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_EQ(steps[i], static_cast<int>(i) + 1) << "gap or repeat at line " << i;
  }
  Result final_job = Ampctl({server_flag_, "--output=json", "get", job.name()});
  v1::Job done;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(final_job.out, &done).ok());
  EXPECT_EQ(static_cast<int64_t>(steps.size()), done.progress().step());
}

// ampctl logs: the job's own lines (where it trains, each checkpoint, state
// changes). --follow reads until the job ends and, across dropped
// connections, prints every line once; without it, what is there now.
TEST(AmpctlLogsTest, FollowSurvivesCutsWithoutGapsOrRepeatsAndMatchesTheHistory) {
  AmpdProcess server({"--checkpoint_every_steps=25"});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::string direct = "--server=" + server.address();
  TcpProxy proxy(server.port());
  const std::string spec = TmpFile("logs_spec.json", TinyJobJson(1000000));
  Result submitted = Ampctl({direct, "-o", "json", "submit", spec});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(submitted.out, &job).ok());
  std::thread cutter = CutThriceThenCancel(&proxy, direct, job.name());
  Result followed = Ampctl(
      {"--server=127.0.0.1:" + std::to_string(proxy.port()), "logs", job.name(), "--follow"});
  cutter.join();
  EXPECT_EQ(followed.code, 0) << followed.err;
  EXPECT_GE(proxy.connections_accepted(), 2);
  std::vector<int> checkpoints;
  std::regex re(R"(checkpoint at step (\d+) written: [0-9.]+ MiB in [0-9.]+ s)");
  for (auto it = std::sregex_iterator(followed.out.begin(), followed.out.end(), re);
       it != std::sregex_iterator(); ++it) {
    checkpoints.push_back(std::stoi((*it)[1]));
  }
  ASSERT_GE(checkpoints.size(), 4u) << followed.out;
  for (size_t i = 0; i + 1 < checkpoints.size(); ++i) {  // the last: the cancel's own
    ASSERT_EQ(checkpoints[i], 25 * static_cast<int>(i + 1)) << "gap or repeat:\n" << followed.out;
  }
  EXPECT_NE(followed.out.find("INFO    step 0      training on cpu: "), std::string::npos)
      << followed.out;
  // No line twice (each has its event's timestamp).
  std::istringstream lines(followed.out);
  std::set<std::string> seen;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(seen.insert(line).second) << "repeated: " << line;
  }
  EXPECT_NE(followed.out.find("state CANCELLED: cancelled by request"), std::string::npos)
      << followed.out;
  // Without --follow: the whole history now, the same lines.
  Result history = Ampctl({direct, "logs", job.name()});
  EXPECT_EQ(history.code, 0) << history.err;
  EXPECT_EQ(history.out, followed.out);
  // -o json: one event per line, with its sequence.
  Result json = Ampctl({direct, "logs", job.name(), "-o", "json"});
  EXPECT_EQ(json.code, 0);
  EXPECT_NE(json.out.find("\"log\":{\"severity\":\"SEVERITY_INFO\""), std::string::npos)
      << json.out;
  EXPECT_NE(json.out.find("\"sequence\""), std::string::npos);
}

TEST_F(AmpctlTest, BadSpecFilesAreReportedWithFileAndField) {
  const std::string typo = TmpFile("typo.json", R"({"trainin": {"steps": 3}})");
  Result r = Ampctl({server_flag_, "submit", typo});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("typo.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trainin"), std::string::npos) << r.err;

  const std::string invalid =
      TmpFile("invalid.json", R"({"training": {"batchSize": "-1"}, "optimizer": {"lr": -1}})");
  r = Ampctl({server_flag_, "submit", invalid});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("spec.training.batch_size: must be > 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("spec.optimizer.lr"), std::string::npos) << r.err;

  r = Ampctl({server_flag_, "submit", "/nonexistent/spec.json"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/spec.json: cannot open"), std::string::npos) << r.err;
}

TEST_F(AmpctlTest, JsonOutputIsParsable) {
  Result submitted = Ampctl({server_flag_, "--output=json", "submit", Spec(12)});
  ASSERT_EQ(submitted.code, 0);
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(submitted.out, &job).ok());
  Result watched = Ampctl({server_flag_, "--output=json", "watch", job.name()});
  ASSERT_EQ(watched.code, 0) << watched.err;
  std::istringstream lines(watched.out);
  std::string line;
  int events = 0, steps = 0;
  while (std::getline(lines, line)) {
    v1::MetricsEvent e;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &e).ok()) << line;
    ++events;
    steps += e.has_step_record();
  }
  EXPECT_EQ(steps, 12);
  EXPECT_GT(events, 12);
  Result got = Ampctl({server_flag_, "--output=json", "get", job.name()});
  v1::Job fetched;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(got.out, &fetched).ok()) << got.out;
  EXPECT_EQ(fetched.state(), v1::SUCCEEDED);
  Result list = Ampctl({server_flag_, "--output=json", "list"});
  v1::ListJobsResponse all;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(list.out, &all).ok()) << list.out;
  EXPECT_EQ(all.jobs_size(), 1);
}

TEST_F(AmpctlTest, UnreachableServerAndHelp) {
  Result r = Ampctl({"--server=127.0.0.1:1", "--timeout=2", "list"});
  EXPECT_EQ(r.code, 4);
  EXPECT_NE(r.err.find("cannot reach ampd at 127.0.0.1:1"), std::string::npos) << r.err;
  for (const char* cmd : {"submit", "watch", "get", "list", "cancel", "delete", "precision"}) {
    Result h = Ampctl({cmd, "--help"});
    EXPECT_EQ(h.code, 0) << cmd;
    EXPECT_NE(h.out.find("usage: ampctl " + std::string(cmd)), std::string::npos) << h.out;
  }
  Result unknown = Ampctl({"frobnicate"});
  EXPECT_EQ(unknown.code, 2);
  Result bad_flag = Ampctl({"list", "--bogus"});
  EXPECT_EQ(bad_flag.code, 2);
  EXPECT_NE(bad_flag.err.find("--bogus"), std::string::npos);
}

TEST_F(AmpctlTest, UploadADataSetTrainOnItAndDownloadTheWeights) {
  std::string csv = "x0,x1,x2,x3,label\n";
  for (int i = 0; i < 300; ++i) {
    const double a = (i * 37 % 101) / 50.0 - 1, b = (i * 53 % 97) / 48.0 - 1;
    csv += std::to_string(a) + "," + std::to_string(b) + ",0.5,-0.25," +
           std::to_string(a + b > 0 ? 1 : 0) + "\n";
  }
  const std::string local = TmpFile("train.csv", csv);
  Result up = Ampctl({server_flag_, "upload", local, "mine/train.csv"});
  ASSERT_EQ(up.code, 0) << up.err;
  EXPECT_NE(up.out.find("uploads/mine/train.csv"), std::string::npos) << up.out;
  // Stored in the uploader's own directory ("local" without authentication).
  EXPECT_EQ(Slurp(server_->data_dir() + "/uploads/local/mine/train.csv"), csv);

  const std::string spec = TmpFile("csv_job.json", R"({
    "data": {"file": {"format": "FORMAT_CSV", "trainCsv": "uploads/mine/train.csv", "labelColumn": -1}},
    "model": {"mlp": {"hidden": [8]}},
    "training": {"steps": 30, "batchSize": 20}})");
  Result submitted = Ampctl({server_flag_, "--output=json", "submit", spec});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(submitted.out, &job).ok());
  Result watched = Ampctl({server_flag_, "watch", job.name()});
  ASSERT_EQ(watched.code, 0) << watched.out << watched.err;

  Result listed = Ampctl({server_flag_, "artifacts", job.name()});
  EXPECT_NE(listed.out.find("model.safetensors"), std::string::npos) << listed.out;
  const std::string out = TmpFile("downloaded.safetensors", "");
  Result down = Ampctl({server_flag_, "download", job.name(), "--out=" + out});
  ASSERT_EQ(down.code, 0) << down.err;
  EXPECT_NE(down.out.find("sha256"), std::string::npos);
  const std::string original =
      Slurp(server_->data_dir() + "/jobs/" + job.id() + "/model.safetensors");
  EXPECT_GT(original.size(), 100u);
  EXPECT_EQ(Slurp(out), original);

  Result missing = Ampctl({server_flag_, "download", job.name(),
                           "checkpoints/step-00000001.safetensors", "--out=" + out + ".x"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("NOT_FOUND"), std::string::npos) << missing.err;
}

TEST_F(AmpctlTest, UploadsAreConfinedCheckedAndLimited) {
  const std::string local = TmpFile("small.csv", "1,2,0\n3,4,1\n");
  Result escape = Ampctl({server_flag_, "upload", local, "../../etc/evil.csv"});
  EXPECT_EQ(escape.code, 2);
  EXPECT_NE(escape.err.find("header.path"), std::string::npos) << escape.err;
  EXPECT_FALSE(std::filesystem::exists(server_->data_dir() + "/../etc/evil.csv"));

  // A wrong checksum: refused, and nothing is stored.
  auto stub = v1::ArtifactService::NewStub(server_->channel());
  grpc::ClientContext ctx;
  v1::UploadedDataset uploaded;
  auto writer = stub->UploadDataset(&ctx, &uploaded);
  v1::UploadDatasetRequest m;
  m.mutable_header()->set_path("bad/sum.csv");
  m.mutable_header()->set_size_bytes(4);
  m.mutable_header()->set_sha256(std::string(64, '0'));
  ASSERT_TRUE(writer->Write(m));
  m.Clear();
  m.set_chunk("abcd");
  writer->Write(m);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_FALSE(std::filesystem::exists(server_->data_dir() + "/uploads/local/bad/sum.csv"));

  AmpdProcess limited({"--max_upload_bytes=8"});
  ASSERT_TRUE(limited.ok());
  Result big = Ampctl({"--server=" + limited.address(), "upload", local, "big.csv"});
  EXPECT_EQ(big.code, 2);
  EXPECT_NE(big.err.find("max_upload_bytes"), std::string::npos) << big.err;
}

TEST_F(AmpctlTest, PrecisionCommands) {
  Result caps = Ampctl({server_flag_, "precision", "caps"});
  EXPECT_EQ(caps.code, 0) << caps.err;
  EXPECT_NE(caps.out.find("bf16-mixed"), std::string::npos) << caps.out;
  Result explain =
      Ampctl({server_flag_, "precision", "explain", Runfile("examples/fashion_mlp_bf16.json")});
  EXPECT_EQ(explain.code, 0) << explain.err;
  EXPECT_NE(explain.out.find("linear"), std::string::npos) << explain.out;
  EXPECT_NE(explain.out.find("BF16"), std::string::npos) << explain.out;
  Result all = Ampctl(
      {server_flag_, "precision", "explain", Runfile("examples/fashion_mlp_bf16.json"), "--all"});
  EXPECT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("\nO3 ("), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("fp8-hybrid ("), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("(not shown: the FP8 modes fp8-hybrid"), std::string::npos) << all.out;
  // A GPT's plan: op and layer names longer than an MLP's, FP8 GEMM notes at
  // the end of rows; every row's policy starts under the POLICY header.
  Result gpt =
      Ampctl({server_flag_, "precision", "explain", Runfile("examples/fortunes_gpt_fp8.json")});
  ASSERT_EQ(gpt.code, 0) << gpt.err;
  std::vector<std::string> lines;
  std::istringstream out(gpt.out);
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  ASSERT_GT(lines.size(), 2u) << gpt.out;
  const size_t policy = lines[1].find("POLICY");
  ASSERT_NE(policy, std::string::npos) << gpt.out;
  int rows = 0;
  for (const std::string& line : lines) {
    for (const char* p : {"LOWER_PRECISION", "PASS_THROUGH", "PROMOTE ", "FP32 "}) {
      if (line.find(p) != std::string::npos) {
        EXPECT_EQ(line.find(p), policy) << line << "\n" << gpt.out;
        ++rows;
      }
    }
  }
  EXPECT_GT(rows, 20) << gpt.out;
  EXPECT_NE(gpt.out.find("scaled_dot_product_attention h.0.attn"), std::string::npos) << gpt.out;
  EXPECT_NE(gpt.out.find("FP8 GEMM: input e4m3, weight e4m3, grad_output e5m2"), std::string::npos)
      << gpt.out;
  Result profiles = Ampctl({server_flag_, "precision", "profiles"});
  EXPECT_EQ(profiles.code, 0);
  EXPECT_NE(profiles.out.find("profiles/O2"), std::string::npos) << profiles.out;
}

TEST_F(AmpctlTest, AGpuJobWithoutAGpuIsRefusedWithTheReason) {
  if (engine::backend::BackendFor(engine::Device::kCuda).ok()) {
    GTEST_SKIP() << "this machine has a usable GPU: the job would be accepted";
  }
  Result r = Ampctl({server_flag_, "submit", Runfile("examples/fashion_mlp_bf16_cuda.json")});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("FAILED_PRECONDITION"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("spec.device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CUDA"), std::string::npos) << r.err;
  // Nothing was queued.
  Result list = Ampctl({server_flag_, "list"});
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_EQ(list.out.find("GPU"), std::string::npos) << list.out;
  // The capabilities say why there is no CUDA device.
  Result caps = Ampctl({server_flag_, "precision", "caps"});
  EXPECT_NE(caps.out.find("unavailable: "), std::string::npos) << caps.out;
}

// A server with --tokens_file: ampctl sends --token (or $AMPD_TOKEN) as a
// bearer token, and each user sees only their own jobs.
TEST(AmpctlSecurityTest, TokenAuthentication) {
  const std::string sha_out = TmpFile("token_sha.txt", "");
  auto sha256 = [&](const std::string& token) {
    EXPECT_EQ(
        std::system(("printf '%s' '" + token + "' | openssl dgst -sha256 -r > " + sha_out).c_str()),
        0);
    return Slurp(sha_out).substr(0, 64);
  };
  const std::string tokens = TmpFile(
      "tokens.txt", sha256("alice-token") + " alice user\n" + sha256("bob-token") + " bob user\n");
  AmpdProcess server({"--tokens_file=" + tokens});
  ASSERT_TRUE(server.ok()) << server.log();
  const std::string server_flag = "--server=" + server.address();
  const std::string spec = TmpFile("token_spec.json", TinyJobJson(10));

  Result anonymous = Ampctl({server_flag, "list"});
  EXPECT_EQ(anonymous.code, 2);
  EXPECT_NE(anonymous.err.find("UNAUTHENTICATED"), std::string::npos) << anonymous.err;
  Result wrong = Ampctl({server_flag, "--token=nope", "submit", spec});
  EXPECT_EQ(wrong.code, 2);
  EXPECT_NE(wrong.err.find("UNAUTHENTICATED"), std::string::npos) << wrong.err;

  Result submitted = Ampctl({server_flag, "--token=alice-token", "--output=json", "submit", spec});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  v1::Job job;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(submitted.out, &job).ok())
      << submitted.out;
  EXPECT_EQ(job.owner(), "alice");
  Result watched = Ampctl({server_flag, "--token=alice-token", "watch", job.name()});
  EXPECT_EQ(watched.code, 0) << watched.out << watched.err;

  Result other = Ampctl({server_flag, "--token=bob-token", "get", job.name()});
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("NOT_FOUND"), std::string::npos) << other.err;

  setenv("AMPD_TOKEN", "alice-token", 1);
  Result listed = Ampctl({server_flag, "list"});
  unsetenv("AMPD_TOKEN");
  EXPECT_EQ(listed.code, 0) << listed.err;
  EXPECT_NE(listed.out.find(job.id()), std::string::npos) << listed.out;
}

// get and list read a language model's eval as val loss and bits per byte (it
// has no accuracy), and get shows the speed, the optimizer and the bytes its
// states take; a classifier's rows keep their accuracy.
TEST_F(AmpctlTest, GetAndListShowWhatEachKindOfJobMeasures) {
  const std::string spec = TmpFile("gpt_8bit.json", R"({
    "model": {"gpt": {"blockSize": "16", "nLayer": "1", "nHead": "2", "nEmbd": "64"}},
    "data": {"builtin": "fortunes"},
    "optimizer": {"adamw": {"stateBits": 8}},
    "training": {"steps": "4", "batchSize": "4", "evalInterval": "4"}})");
  Result gpt = Ampctl({server_flag_, "-o", "json", "submit", spec});
  ASSERT_EQ(gpt.code, 0) << gpt.err;
  const size_t at = gpt.out.find("\"name\": \"jobs/");
  ASSERT_NE(at, std::string::npos) << gpt.out;
  const std::string name = gpt.out.substr(at + 9, gpt.out.find('"', at + 9) - at - 9);
  ASSERT_EQ(Ampctl({server_flag_, "watch", name}).code, 0);
  Result got = Ampctl({server_flag_, "get", name});
  ASSERT_EQ(got.code, 0) << got.err;
  EXPECT_TRUE(std::regex_search(got.out, std::regex(R"(eval +val loss \d+\.\d{4}, \d+\.\d{4} )"
                                                    R"(bits/byte \(step 4\))")))
      << got.out;
  EXPECT_EQ(got.out.find("accuracy"), std::string::npos) << got.out;
  EXPECT_TRUE(std::regex_search(got.out, std::regex(R"(speed +\d+ tokens/s, MFU \d+\.\d%)")))
      << got.out;
  EXPECT_NE(got.out.find("optimizer  AdamW lr 0.001"), std::string::npos) << got.out;
  EXPECT_NE(got.out.find("8-bit blockwise states on"), std::string::npos) << got.out;
  EXPECT_TRUE(std::regex_search(got.out, std::regex(R"(opt state +\d+\.\d\d MiB allocated)")))
      << got.out;

  ASSERT_EQ(Ampctl({server_flag_, "submit", Spec(4), "--watch"}).code, 0);
  Result list = Ampctl({server_flag_, "list"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find("EVAL"), std::string::npos) << list.out;
  EXPECT_TRUE(std::regex_search(list.out, std::regex(R"(4/4 +loss \d+\.\d{3} )"))) << list.out;
  EXPECT_TRUE(std::regex_search(list.out, std::regex(R"(4/4 +\d+\.\d\d% )"))) << list.out;
}

// An FP8 job's scaling records (step 1, every 100 steps, the last) are one
// line each in watch: tensors, the scales' range, the largest amax and where,
// and the saturated values.
TEST_F(AmpctlTest, WatchSummarisesFp8ScalingRecords) {
  const std::string spec = TmpFile("gpt_fp8.json", R"({
    "model": {"gpt": {"blockSize": "16", "nLayer": "1", "nHead": "2", "nEmbd": "32"}},
    "data": {"builtin": "fortunes"},
    "precision": {"profile": "fp8-hybrid"},
    "training": {"steps": "3", "batchSize": "4"}})");
  Result r = Ampctl({server_flag_, "submit", spec, "--watch"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // One block: c_attn, c_proj, c_fc and the MLP's c_proj, three tensors each.
  const std::regex line(
      R"(fp8   step (\d+): 12 tensors, scales 2\^-?\d+\.\d\.\.2\^-?\d+\.\d, amax up to )"
      R"(\S+ \(h\.0\.\S+ (input|weight|grad_output)\), \d+ values saturated)");
  std::vector<int> steps;
  std::istringstream out(r.out);
  for (std::string l; std::getline(out, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line)) steps.push_back(std::stoi(m[1]));
  }
  EXPECT_EQ(steps, (std::vector<int>{1, 3})) << r.out;
}

// ampctl generate prints the prompt and the text as it arrives; the same
// seed prints the same text; bad flags and a bad temperature are named.
TEST_F(AmpctlTest, GeneratePrintsTextAsItArrives) {
  const std::string spec = TmpFile("gpt_job.json", R"({
    "model": {"gpt": {"blockSize": "16", "nLayer": "1", "nHead": "2", "nEmbd": "32"}},
    "data": {"builtin": "fortunes"},
    "training": {"steps": "20", "batchSize": "4"}})");
  Result submitted = Ampctl({server_flag_, "--output=json", "submit", spec, "--watch"});
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  Result listed = Ampctl({server_flag_, "-o", "json", "list"});
  const size_t at = listed.out.find("\"name\": \"jobs/");
  ASSERT_NE(at, std::string::npos) << listed.out;
  const std::string name = listed.out.substr(at + 9, listed.out.find('"', at + 9) - at - 9);
  Result a = Ampctl({server_flag_, "generate", name, "--prompt", "The ", "--max_new_tokens=30",
                     "--seed=3", "--top_k=20"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out.rfind("The ", 0), 0u) << a.out;
  EXPECT_GT(a.out.size(), 4u + 10);  // 30 bytes, as whole characters
  EXPECT_NE(a.err.find("seed 3"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("30 tokens"), std::string::npos) << a.err;
  Result b = Ampctl({server_flag_, "generate", name, "--prompt=The ", "--max_new_tokens", "30",
                     "--seed", "3", "--top_k", "20"});
  EXPECT_EQ(b.out, a.out);
  Result json = Ampctl({server_flag_, "-o", "json", "generate", name, "--prompt=A",
                        "--max_new_tokens=3", "--temperature=0"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.out.find("\"done\":true"), std::string::npos) << json.out;
  Result bad = Ampctl({server_flag_, "generate", name, "--prompt=A", "--temperature=-1"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("temperature"), std::string::npos) << bad.err;
  Result no_prompt = Ampctl({server_flag_, "generate", name});
  EXPECT_EQ(no_prompt.code, 2);
  EXPECT_NE(no_prompt.err.find("--prompt"), std::string::npos) << no_prompt.err;
}

}  // namespace
}  // namespace ampd::testing
