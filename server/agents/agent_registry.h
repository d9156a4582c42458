#ifndef AMPD_SERVER_AGENTS_AGENT_REGISTRY_H_
#define AMPD_SERVER_AGENTS_AGENT_REGISTRY_H_

// The `ampd agent` processes connected to this server (AgentService.Connect),
// the worker slots they lend, and the ranks of data-parallel jobs they run.
//
// A job's ranks beyond the server's own are placed on agents all or nothing
// (Take), started by queueing a StartRanks on each agent's session (Start),
// and followed through the agents' reports (Report) or their disconnection:
// a rank that ends badly, or whose agent goes away, is lost, and rank 0
// learns it through the jobs::WorkerGroup it holds. Thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ampd/v1/agent_service.pb.h"
#include "ampd/v1/precision_service.pb.h"
#include "server/jobs/worker_group.h"

namespace ampd::server::agents {

// Slots taken on agents: (agent name, count).
using Placement = std::vector<std::pair<std::string, int>>;

class AgentRegistry {
 public:
  struct Session;  // one connected agent
  struct Ranks;    // one job attempt's ranks on one agent

  AgentRegistry();
  ~AgentRegistry();

  // Registers an agent for `principal` (who authenticated): INVALID_ARGUMENT
  // naming the field for no name or slots < 1, ALREADY_EXISTS when an agent
  // of that name (or a joined one of that job's rank) is connected. An agent
  // with `job` set joins that job (a launcher started it): CheckJoin (the
  // job manager's) must accept it, and its one slot is that job's only.
  absl::StatusOr<std::shared_ptr<Session>> Connect(const ampd::v1::AgentHello& hello,
                                                   const std::string& principal);
  // The session's next work, waiting up to `wait`; nullopt on timeout, or
  // once the session is closed (then `*closed`).
  // `*finished`: closed because its job ended (EndJob), not by a shutdown.
  std::optional<ampd::v1::AgentWork> NextWork(Session& session, std::chrono::milliseconds wait,
                                              bool* closed, bool* finished = nullptr);
  // The agent is gone: its slots go, and the ranks it ran are lost.
  void Disconnect(const std::shared_ptr<Session>& session);
  // Ends every session (server shutdown).
  void Close();

  std::vector<ampd::v1::WorkerSlots> Slots() const;
  // Agents' slots for any job (joined agents' are their job's only).
  int FreeSlots() const;
  int TotalSlots() const;
  // Agents that joined `job` (resources.external_workers) and are free.
  int Joined(const std::string& job) const;
  // Their slots, in their ranks' order (1, 2, ...): all of ranks
  // 1..n, or none.
  std::optional<Placement> TakeJoined(const std::string& job, int n);
  // The job has ended: its joined agents' sessions end (OK), and they exit.
  void EndJob(const std::string& job);
  // Accepts a joining agent and returns its job's id (the agent may name the
  // job by its name), or refuses it.
  void SetCheckJoin(std::function<absl::StatusOr<std::string>(const ampd::v1::AgentHello&)> check);
  // `n` slots on connected agents, all or none (fewest agents first).
  std::optional<Placement> Take(int n);
  // Gives taken slots back (those of agents still connected).
  void Release(const Placement& placement);
  // Whether every agent of the placement is still connected.
  bool Connected(const Placement& placement) const;

  // Starts ranks first_rank, first_rank+1, ... of a job on the placement's
  // agents (each its share); one group per agent. UNAVAILABLE when one of
  // them is gone.
  struct StartRequest {
    std::string job;
    std::string owner;
    int first_rank = 1;
    int world_size = 2;
    std::string spec_json;
    int64_t resume_step = 0;
    int64_t timeout_ms = 30000;
    // The files the spec names (StartRanks.data_files), each with where the
    // server holds it: the only files the agents may fetch for this job.
    struct DataFile {
      ampd::v1::DataFile file;
      std::string local_path;
    };
    std::vector<DataFile> data_files;
  };
  absl::StatusOr<std::vector<std::unique_ptr<jobs::WorkerGroup>>> Start(
      const Placement& placement, const StartRequest& request);

  // An agent's report on one of its ranks: NOT_FOUND when it runs no such
  // rank (an old attempt's, a stopped one's: harmless).
  absl::Status Report(const ampd::v1::WorkerReport& report, const std::string& principal);
  // Whether `principal`'s agents run ranks of this job attempt now (attempt
  // < 0: any attempt): what lets them use its rendezvous store and fetch its
  // checkpoint.
  bool Runs(const std::string& principal, const std::string& job, int64_t attempt) const;
  // Where the server holds `path`, a file the spec of a job that
  // `principal`'s agents run names; nullopt for any other path or job.
  std::optional<std::string> DataFilePath(const std::string& principal, const std::string& job,
                                          const std::string& path) const;

  // Called (outside the registry's lock) when agents' slots change: one
  // connected or left, or slots were given back.
  void SetOnChange(std::function<void()> on_change);

 private:
  friend class RemoteRanks;
  void Stop(const std::shared_ptr<Ranks>& ranks);
  void Changed();

  mutable std::mutex mu_;
  std::condition_variable cv_;  // work queued, a session closed, a rank ended
  std::map<std::string, std::shared_ptr<Session>> sessions_;  // by agent name
  int64_t next_attempt_ = 1;
  bool closed_ = false;
  std::function<void()> on_change_;
  std::function<absl::StatusOr<std::string>(const ampd::v1::AgentHello&)> check_join_;
};

}  // namespace ampd::server::agents

#endif  // AMPD_SERVER_AGENTS_AGENT_REGISTRY_H_
