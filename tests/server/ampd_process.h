#ifndef AMPD_TESTS_SERVER_AMPD_PROCESS_H_
#define AMPD_TESTS_SERVER_AMPD_PROCESS_H_

// Runs the real `ampd` binary on a free loopback port: for integration tests,
// and for the server benchmark (bench/server_bench.cc), which starts it with
// its own binary, data dir and environment (AmpdOptions).

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace ampd::testing {

struct AmpdOptions {
  std::vector<std::string> flags;          // after the defaults, so they win
  std::string data_dir;                    // empty: a fresh one under $TEST_TMPDIR (or /tmp)
  std::string binary;                      // empty: the runfile (server/ampd, see UseAmpdBinary)
  std::map<std::string, std::string> env;  // set (or replaced) in the server's environment
  std::chrono::seconds start_timeout{30};  // to write its port file
};

class AmpdProcess {
 public:
  static std::unique_ptr<AmpdProcess> Start(const AmpdOptions& options);
  // Starts ampd with a fresh data dir under TEST_TMPDIR and `extra_flags`.
  // The binary is found in the test's runfiles (server/ampd).
  explicit AmpdProcess(std::vector<std::string> extra_flags = {});
  // Uses `data_dir` (e.g. a previous process's) instead of a fresh one.
  AmpdProcess(std::vector<std::string> extra_flags, const std::string& data_dir);
  ~AmpdProcess();

  bool ok() const { return port_ > 0; }
  // Why !ok(): it exited at start-up, or never wrote its port file.
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::shared_ptr<grpc::Channel> channel() const;
  const std::string& data_dir() const { return data_dir_; }
  // Sends SIGTERM and waits (SIGKILL after 60 s); returns the exit status (or -1).
  int Stop();
  // SIGKILL, no cleanup.
  void Kill();
  pid_t pid() const { return pid_; }
  std::string log() const;  // the server's stderr so far
  std::string LogTail(size_t bytes = 4000) const;

 private:
  struct Tag {};
  explicit AmpdProcess(Tag) {}
  void Launch(const AmpdOptions& options);

  pid_t pid_ = -1;
  int port_ = 0;
  std::string data_dir_;
  std::string log_path_;
  std::string error_;
};

// `ampd agent ARGS...` (server/agent_main.h) with `env` on top of this
// process's, its output in a log file: an agent "on another machine" for
// tests, with a data dir of its own.
class AgentProcess {
 public:
  AgentProcess(std::vector<std::string> args, std::map<std::string, std::string> env);
  ~AgentProcess();  // SIGKILL
  pid_t pid() const { return pid_; }
  // The exit status once it has exited within `timeout`; -1 if it is still
  // running then (or was killed by a signal).
  int Wait(std::chrono::milliseconds timeout);
  void Kill();
  std::string log() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// The `ampd worker` children of process `parent` (a server or an agent).
std::vector<pid_t> WorkerChildren(pid_t parent);

// The path of a runfile ("server/ampd") in a test or a `bazel run` binary.
std::string Runfile(const std::string& path);

// Makes later AmpdProcesses start another build of the server (a runfile
// path such as "tests/server/ampd_emu") instead of server/ampd.
void UseAmpdBinary(const std::string& runfile_path);

// A small synthetic job spec (JSON) that trains in well under a second;
// `device` ("DEVICE_CUDA", ...) is left to the server's default when empty.
std::string TinyJobJson(int steps, const std::string& precision = "32-true", int seed = 0,
                        const std::string& device = "");

}  // namespace ampd::testing

#endif  // AMPD_TESTS_SERVER_AMPD_PROCESS_H_
