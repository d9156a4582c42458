#ifndef AMPD_SERVER_JOBS_WORKER_GROUP_H_
#define AMPD_SERVER_JOBS_WORKER_GROUP_H_

// Some ranks of a data-parallel job that run outside rank 0: child processes
// of the server (local_workers.h) or of an agent on another machine
// (agents/agent_registry.h). Rank 0 sees both the same way: it learns that
// one is lost, stops them, or waits for them to end.

#include <chrono>
#include <optional>
#include <string>

namespace ampd::server::jobs {

class WorkerGroup {
 public:
  virtual ~WorkerGroup() = default;
  // Waits up to `grace` for every rank to end by itself, then stops the
  // rest. Returns the first lost rank's reason, "" when all ended cleanly.
  virtual std::string Finish(std::chrono::milliseconds grace) = 0;
  // Stops every rank still running (a cancelled or failed rank 0: the others
  // would wait in a collective until it timed out).
  virtual void Kill() = 0;
  // The first lost rank's reason, nullopt while none is lost.
  virtual std::optional<std::string> lost() const = 0;
  // Where the ranks run, for the job's log: "pids 4242, 4243".
  virtual std::string Where() const = 0;
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_WORKER_GROUP_H_
