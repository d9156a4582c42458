#ifndef AMPD_TESTS_SERVER_AMPD_PROCESS_H_
#define AMPD_TESTS_SERVER_AMPD_PROCESS_H_

// Runs the real `ampd` binary for integration tests, on a free loopback port.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace ampd::testing {

class AmpdProcess {
 public:
  // Starts ampd with a fresh data dir under TEST_TMPDIR and `extra_flags`.
  // The binary is found in the test's runfiles (server/ampd).
  explicit AmpdProcess(std::vector<std::string> extra_flags = {});
  // Uses `data_dir` (e.g. a previous process's) instead of a fresh one.
  AmpdProcess(std::vector<std::string> extra_flags, const std::string& data_dir);
  ~AmpdProcess();

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::shared_ptr<grpc::Channel> channel() const;
  const std::string& data_dir() const { return data_dir_; }
  // Sends SIGTERM and waits; returns the exit status (or -1).
  int Stop();
  // SIGKILL, no cleanup.
  void Kill();
  pid_t pid() const { return pid_; }
  std::string log() const;  // the server's stderr so far

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string data_dir_;
  std::string log_path_;
};

// Makes later AmpdProcesses start another build of the server (a runfile
// path such as "tests/server/ampd_emu") instead of server/ampd.
void UseAmpdBinary(const std::string& runfile_path);

// A small synthetic job spec (JSON) that trains in well under a second;
// `device` ("DEVICE_CUDA", ...) is left to the server's default when empty.
std::string TinyJobJson(int steps, const std::string& precision = "32-true", int seed = 0,
                        const std::string& device = "");

}  // namespace ampd::testing

#endif  // AMPD_TESTS_SERVER_AMPD_PROCESS_H_
