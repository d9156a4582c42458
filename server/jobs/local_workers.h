#ifndef AMPD_SERVER_JOBS_LOCAL_WORKERS_H_
#define AMPD_SERVER_JOBS_LOCAL_WORKERS_H_

// The other ranks of a data-parallel job (1..N-1) as child processes of the
// server: `BINARY worker ARGS... --rank=R`, each writing its output to
// LOG_DIR/worker-R.log. Rank 0 trains inside the server (its history,
// checkpoints and outputs are the job's), so only the others are processes.
//
// A child that ends before the job is done with it (killed, out of memory, an
// error) is "lost": `on_lost` is called once, on the monitor thread, with why
// ("worker 1 (pid 4242) was killed by signal 9"), so that the job can stop
// its own rank at once rather than wait for a collective to time out.
// Children are started with posix_spawn (no fork of a threaded server), an
// empty signal mask and default dispositions; the worker itself asks the
// kernel to kill it if the server dies (worker_main.cc).

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/jobs/worker_group.h"

namespace ampd::server::jobs {

class LocalWorkers : public WorkerGroup {
 public:
  struct Options {
    std::string binary;             // the ampd binary (its `worker` mode)
    std::vector<std::string> args;  // after "worker", the same for every rank
    std::string log_dir;            // worker-R.log for each rank R
    int world_size = 2;             // ranks 1..world_size-1 are started,
    std::vector<int> ranks;         // unless these are given (an agent's share)
    // Extra environment, "NAME=VALUE", on top of the server's.
    std::vector<std::string> env;
    // And per rank (a CUDA rank's device: CUDA_VISIBLE_DEVICES).
    std::function<std::vector<std::string>(int rank)> rank_env;
    std::function<void(const std::string& reason)> on_lost;
    // Every child that ends while not being stopped: lost, or exit status 0
    // (`reason` then says so). On the monitor thread.
    std::function<void(int rank, bool lost, const std::string& reason)> on_exit;
  };
  // Starts every child or none (those started are killed on failure).
  static absl::StatusOr<std::unique_ptr<LocalWorkers>> Start(Options options);
  ~LocalWorkers() override;  // kills and reaps the children still running

  std::string Finish(std::chrono::milliseconds grace) override;
  void Kill() override;  // SIGKILL
  std::optional<std::string> lost() const override;
  std::string Where() const override;
  std::vector<pid_t> pids() const;

 private:
  struct Child {
    int rank = 0;
    pid_t pid = -1;
    bool ended = false;
  };
  explicit LocalWorkers(Options options) : options_(std::move(options)) {}
  void Monitor();
  std::string Describe(const Child& c, int wait_status) const;

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable ended_cv_;  // a child was reaped
  std::vector<Child> children_;
  std::optional<std::string> lost_;
  bool stopping_ = false;  // ends from here on are expected (Kill, Finish's deadline)
  std::atomic<bool> quit_{false};
  std::thread monitor_;
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_LOCAL_WORKERS_H_
