#include "tests/server/ampd_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace ampd::testing {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir && ws) return std::string(srcdir) + "/" + ws + "/" + path;
  return path;
}

}  // namespace

namespace {
std::string& BinaryRunfile() {
  static std::string* path = new std::string("server/ampd");
  return *path;
}
}  // namespace

void UseAmpdBinary(const std::string& runfile_path) { BinaryRunfile() = runfile_path; }

AmpdProcess::AmpdProcess(std::vector<std::string> extra_flags)
    : AmpdProcess(std::move(extra_flags), "") {}

AmpdProcess::AmpdProcess(std::vector<std::string> extra_flags, const std::string& data_dir) {
  static std::atomic<int> counter{0};
  const std::string base =
      TmpDir() + "/ampd" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  data_dir_ = data_dir.empty() ? base + "_data" : data_dir;
  log_path_ = base + ".log";
  const std::string port_file = base + ".port";
  std::vector<std::string> args = {Runfile(BinaryRunfile()), "--listen=127.0.0.1:0",
                                   "--data_dir=" + data_dir_, "--port_file=" + port_file,
                                   "--heartbeat_interval_ms=100"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  pid_ = fork();
  if (pid_ == 0) {
    FILE* log = std::fopen(log_path_.c_str(), "w");
    if (log) dup2(fileno(log), 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      port_ = port;
      return;
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

AmpdProcess::~AmpdProcess() {
  if (pid_ > 0) Kill();
}

std::shared_ptr<grpc::Channel> AmpdProcess::channel() const {
  return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

int AmpdProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void AmpdProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string AmpdProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TinyJobJson(int steps, const std::string& precision, int seed,
                        const std::string& device) {
  return R"({"model": {"mlp": {"hidden": [16]}},
    "data": {"synthetic": {"numExamples": 512, "featureDim": 8, "numClasses": 3,
                           "numTestExamples": 128, "seed": 7}},
    "precision": {"profile": ")" +
         precision + R"("},
    "training": {"steps": )" +
         std::to_string(steps) + R"(, "batchSize": 32, "evalInterval": 10, "seed": )" +
         std::to_string(seed) + "}" +
         (device.empty() ? std::string() : R"(, "device": ")" + device + "\"") + "}";
}

}  // namespace ampd::testing
