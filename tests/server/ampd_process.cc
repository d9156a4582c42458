#include "tests/server/ampd_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ampd::testing {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string& BinaryRunfile() {
  static std::string* path = new std::string("server/ampd");
  return *path;
}

// Starts `args` with `env` on top of this process's environment, its stderr
// (and stdout when `both`) into `log_path`; returns the pid (-1: fork failed).
pid_t Spawn(std::vector<std::string> args, const std::map<std::string, std::string>& env,
            const std::string& log_path, bool both) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment is built before fork: the child only calls execve.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (env.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      if (both) dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir && ws) return std::string(srcdir) + "/" + ws + "/" + path;
  std::vector<std::string> candidates;
  if (const char* r = std::getenv("RUNFILES_DIR"))
    candidates.push_back(std::string(r) + "/ampd/" + path);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) candidates.push_back(std::string(self, n) + ".runfiles/ampd/" + path);
  for (const std::string& c : candidates) {
    if (access(c.c_str(), F_OK) == 0) return c;
  }
  return path;  // `bazel run` starts in the runfiles tree
}

void UseAmpdBinary(const std::string& runfile_path) { BinaryRunfile() = runfile_path; }

AmpdProcess::AmpdProcess(std::vector<std::string> extra_flags)
    : AmpdProcess(std::move(extra_flags), "") {}

AmpdProcess::AmpdProcess(std::vector<std::string> extra_flags, const std::string& data_dir) {
  AmpdOptions o;
  o.flags = std::move(extra_flags);
  o.data_dir = data_dir;
  Launch(o);
}

std::unique_ptr<AmpdProcess> AmpdProcess::Start(const AmpdOptions& options) {
  std::unique_ptr<AmpdProcess> p(new AmpdProcess(Tag{}));
  p->Launch(options);
  return p;
}

void AmpdProcess::Launch(const AmpdOptions& o) {
  static std::atomic<int> counter{0};
  const std::string base =
      TmpDir() + "/ampd" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  data_dir_ = o.data_dir.empty() ? base + "_data" : o.data_dir;
  log_path_ = base + ".log";
  const std::string port_file = base + ".port";
  const std::string binary = o.binary.empty() ? Runfile(BinaryRunfile()) : o.binary;
  std::vector<std::string> args = {binary, "--listen=127.0.0.1:0", "--data_dir=" + data_dir_,
                                   "--port_file=" + port_file, "--heartbeat_interval_ms=100"};
  args.insert(args.end(), o.flags.begin(), o.flags.end());
  pid_ = Spawn(std::move(args), o.env, log_path_, /*both=*/false);
  if (pid_ < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + o.start_timeout;
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
      error_ = binary + " exited at start-up:\n" + LogTail();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  error_ = binary + " did not write its port file in time:\n" + LogTail();
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid_, &status, WNOHANG) != pid_) {
    if (std::chrono::steady_clock::now() > deadline) {
      Kill();
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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

std::string AmpdProcess::LogTail(size_t bytes) const {
  const std::string s = log();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

AgentProcess::AgentProcess(std::vector<std::string> args, std::map<std::string, std::string> env) {
  static std::atomic<int> counter{0};
  log_path_ =
      TmpDir() + "/agent-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".log";
  std::vector<std::string> argv_strings = {Runfile(BinaryRunfile()), "agent"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  pid_ = Spawn(std::move(argv_strings), env, log_path_, /*both=*/true);
}

AgentProcess::~AgentProcess() { Kill(); }

int AgentProcess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) != pid_) {
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void AgentProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string AgentProcess::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<pid_t> WorkerChildren(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || state == 'Z') continue;
    std::ifstream cmd(e.path() / "cmdline", std::ios::binary);
    std::stringstream cmdline;
    cmdline << cmd.rdbuf();
    if (cmdline.str().find(std::string("worker\0", 7)) != std::string::npos) {
      out.push_back(static_cast<pid_t>(std::stol(name)));
    }
  }
  return out;
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
