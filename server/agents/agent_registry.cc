#include "server/agents/agent_registry.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ampd::server::agents {

namespace v1 = ::ampd::v1;

struct AgentRegistry::Session {
  std::string name;
  std::string principal;
  std::string device_kind;
  int slots = 0;
  int free = 0;
  std::deque<v1::AgentWork> work;
  bool closed = false;
  bool finished = false;                           // its job ended (joined agents)
  std::string job;                                 // a joined agent's job; empty: any job's
  int rank = 0;                                    // a joined agent's rank in that job
  std::map<int64_t, std::shared_ptr<Ranks>> runs;  // by attempt
};

struct AgentRegistry::Ranks {
  std::string job;
  int64_t attempt = 0;
  std::string agent;
  std::vector<int> ranks;
  std::set<int> ended;
  std::optional<std::string> lost;
  bool stopped = false;
  std::map<std::string, std::string> data_files;  // spec path -> the server's file
};

// One agent's share of a job attempt, as rank 0 sees it.
class RemoteRanks : public jobs::WorkerGroup {
 public:
  RemoteRanks(AgentRegistry* registry, std::shared_ptr<AgentRegistry::Ranks> ranks)
      : registry_(registry), ranks_(std::move(ranks)) {}
  ~RemoteRanks() override { Kill(); }

  std::string Finish(std::chrono::milliseconds grace) override {
    {
      std::unique_lock<std::mutex> lock(registry_->mu_);
      registry_->cv_.wait_for(lock, grace, [this] {
        return ranks_->lost.has_value() || ranks_->ended.size() == ranks_->ranks.size();
      });
    }
    Kill();
    std::lock_guard<std::mutex> lock(registry_->mu_);
    return ranks_->lost.value_or("");
  }
  void Kill() override { registry_->Stop(ranks_); }
  std::optional<std::string> lost() const override {
    std::lock_guard<std::mutex> lock(registry_->mu_);
    return ranks_->lost;
  }
  std::string Where() const override {
    return absl::StrCat("agent ", ranks_->agent, " (rank", ranks_->ranks.size() == 1 ? " " : "s ",
                        absl::StrJoin(ranks_->ranks, ", "), ")");
  }

 private:
  AgentRegistry* registry_;
  std::shared_ptr<AgentRegistry::Ranks> ranks_;
};

AgentRegistry::AgentRegistry() = default;
AgentRegistry::~AgentRegistry() { Close(); }

absl::StatusOr<std::shared_ptr<AgentRegistry::Session>> AgentRegistry::Connect(
    const v1::AgentHello& hello, const std::string& principal) {
  if (hello.name().empty() || hello.name().size() > 200) {
    return absl::InvalidArgumentError("name: an agent needs a name of 1 to 200 characters");
  }
  if (hello.slots() < 1 || hello.slots() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots: an agent lends 1 to 1024 worker slots, not ", hello.slots()));
  }
  std::string job_id;
  if (!hello.job().empty()) {
    std::function<absl::StatusOr<std::string>(const v1::AgentHello&)> check;
    {
      std::lock_guard<std::mutex> lock(mu_);
      check = check_join_;
    }
    if (!check) return absl::FailedPreconditionError("job: this server takes no joining ranks");
    absl::StatusOr<std::string> id = check(hello);
    if (!id.ok()) return id.status();
    job_id = *std::move(id);
    if (hello.slots() != 1) {
      return absl::InvalidArgumentError("slots: a rank joining a job lends exactly 1 slot");
    }
  }
  auto s = std::make_shared<Session>();
  s->name = hello.name();
  s->job = job_id;
  s->rank = hello.rank();
  s->principal = principal;
  s->device_kind = hello.device_kind().empty() ? "cpu" : hello.device_kind();
  s->slots = s->free = hello.slots();
  v1::AgentWork registered;
  registered.set_registered(s->name);
  s->work.push_back(std::move(registered));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return absl::UnavailableError("the server is shutting down");
    if (sessions_.count(s->name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("name: an agent named \"", s->name, "\" is already connected"));
    }
    for (const auto& [name, other] : sessions_) {
      if (!s->job.empty() && other->job == s->job && other->rank == s->rank) {
        return absl::AlreadyExistsError(absl::StrCat("rank: rank ", s->rank, " of job ", s->job,
                                                     " has already joined (as \"", name, "\")"));
      }
    }
    sessions_[s->name] = s;
  }
  Changed();
  return s;
}

std::optional<v1::AgentWork> AgentRegistry::NextWork(Session& session,
                                                     std::chrono::milliseconds wait, bool* closed,
                                                     bool* finished) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return session.closed || !session.work.empty(); });
  // The queued work first (a job's last StopRanks before its end).
  if (session.closed && !session.work.empty() && session.finished) {
    v1::AgentWork w = std::move(session.work.front());
    session.work.pop_front();
    return w;
  }
  *closed = session.closed;
  if (finished != nullptr) *finished = session.finished;
  if (session.closed || session.work.empty()) return std::nullopt;
  v1::AgentWork w = std::move(session.work.front());
  session.work.pop_front();
  return w;
}

void AgentRegistry::Disconnect(const std::shared_ptr<Session>& session) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    session->closed = true;
    for (auto& [attempt, ranks] : session->runs) {
      if (!ranks->lost) {
        ranks->lost = absl::StrCat("agent ", session->name, " (ranks ",
                                   absl::StrJoin(ranks->ranks, ", "), ") disconnected");
      }
    }
    session->runs.clear();
    auto it = sessions_.find(session->name);
    if (it != sessions_.end() && it->second == session) sessions_.erase(it);
  }
  cv_.notify_all();
  Changed();
}

void AgentRegistry::Close() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (auto& [name, s] : sessions_) all.push_back(s);
  }
  for (auto& s : all) Disconnect(s);
}

std::vector<v1::WorkerSlots> AgentRegistry::Slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerSlots> out;
  for (const auto& [name, s] : sessions_) {
    v1::WorkerSlots w;
    w.set_host(absl::StrCat(s->job.empty() ? "agent:" : "joined:", name));
    w.set_device_kind(s->device_kind);
    w.set_slots(s->slots);
    w.set_free(s->free);
    out.push_back(std::move(w));
  }
  return out;
}

int AgentRegistry::FreeSlots() const {
  std::lock_guard<std::mutex> lock(mu_);
  int free = 0;
  for (const auto& [name, s] : sessions_) {
    if (s->job.empty()) free += s->free;
  }
  return free;
}

int AgentRegistry::TotalSlots() const {
  std::lock_guard<std::mutex> lock(mu_);
  int total = 0;
  for (const auto& [name, s] : sessions_) {
    if (s->job.empty()) total += s->slots;
  }
  return total;
}

std::optional<Placement> AgentRegistry::Take(int n) {
  if (n <= 0) return Placement{};
  std::lock_guard<std::mutex> lock(mu_);
  // Most free slots first: a job's ranks on as few machines as can hold them.
  std::vector<Session*> order;
  for (auto& [name, s] : sessions_) {
    if (s->free > 0 && s->job.empty()) order.push_back(s.get());
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Session* a, const Session* b) { return a->free > b->free; });
  Placement p;
  int left = n;
  for (Session* s : order) {
    if (left == 0) break;
    const int take = std::min(left, s->free);
    p.emplace_back(s->name, take);
    left -= take;
  }
  if (left > 0) return std::nullopt;
  for (const auto& [name, count] : p) sessions_.at(name)->free -= count;
  return p;
}

void AgentRegistry::Release(const Placement& placement) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, count] : placement) {
      auto it = sessions_.find(name);
      if (it != sessions_.end())
        it->second->free = std::min(it->second->slots, it->second->free + count);
    }
  }
  if (!placement.empty()) Changed();
}

int AgentRegistry::Joined(const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [name, s] : sessions_) {
    if (s->job == job && s->free > 0) ++n;
  }
  return n;
}

std::optional<Placement> AgentRegistry::TakeJoined(const std::string& job, int n) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, Session*> by_rank;
  for (auto& [name, s] : sessions_) {
    if (s->job == job && s->free > 0) by_rank[s->rank] = s.get();
  }
  Placement p;
  for (int rank = 1; rank <= n; ++rank) {
    auto it = by_rank.find(rank);
    if (it == by_rank.end()) return std::nullopt;
    p.emplace_back(it->second->name, 1);
  }
  for (const auto& [name, count] : p) sessions_.at(name)->free -= count;
  return p;
}

void AgentRegistry::EndJob(const std::string& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, s] : sessions_) {
      if (s->job == job) {
        s->closed = true;
        s->finished = true;
      }
    }
  }
  cv_.notify_all();
}

void AgentRegistry::SetCheckJoin(
    std::function<absl::StatusOr<std::string>(const v1::AgentHello&)> check) {
  std::lock_guard<std::mutex> lock(mu_);
  check_join_ = std::move(check);
}

bool AgentRegistry::Connected(const Placement& placement) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, count] : placement) {
    if (!sessions_.count(name)) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::unique_ptr<jobs::WorkerGroup>>> AgentRegistry::Start(
    const Placement& placement, const StartRequest& r) {
  std::vector<std::unique_ptr<jobs::WorkerGroup>> groups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int rank = r.first_rank;
    for (const auto& [name, count] : placement) {
      auto it = sessions_.find(name);
      if (it == sessions_.end()) {
        return absl::UnavailableError(absl::StrCat("agent ", name, " is no longer connected"));
      }
    }
    for (const auto& [name, count] : placement) {
      Session& s = *sessions_.at(name);
      auto ranks = std::make_shared<Ranks>();
      ranks->job = r.job;
      ranks->attempt = next_attempt_++;
      ranks->agent = name;
      v1::AgentWork work;
      v1::StartRanks* start = work.mutable_start();
      start->set_job(r.job);
      start->set_attempt(ranks->attempt);
      start->set_world_size(r.world_size);
      start->set_spec_json(r.spec_json);
      start->set_resume_step(r.resume_step);
      start->set_timeout_ms(r.timeout_ms);
      start->set_owner(r.owner);
      for (const StartRequest::DataFile& f : r.data_files) {
        *start->add_data_files() = f.file;
        ranks->data_files[f.file.path()] = f.local_path;
      }
      for (int i = 0; i < count; ++i) {
        ranks->ranks.push_back(rank);
        start->add_ranks(rank++);
      }
      s.runs[ranks->attempt] = ranks;
      s.work.push_back(std::move(work));
      groups.push_back(std::make_unique<RemoteRanks>(this, ranks));
    }
  }
  cv_.notify_all();
  return groups;
}

void AgentRegistry::Stop(const std::shared_ptr<Ranks>& ranks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ranks->stopped) return;
    ranks->stopped = true;
    auto it = sessions_.find(ranks->agent);
    if (it == sessions_.end() || !it->second->runs.erase(ranks->attempt)) return;
    v1::AgentWork work;
    work.mutable_stop()->set_job(ranks->job);
    work.mutable_stop()->set_attempt(ranks->attempt);
    it->second->work.push_back(std::move(work));
  }
  cv_.notify_all();
}

absl::Status AgentRegistry::Report(const v1::WorkerReport& report, const std::string& principal) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(report.agent());
    if (it == sessions_.end() || it->second->principal != principal) {
      return absl::NotFoundError(
          absl::StrCat("agent: no agent \"", report.agent(), "\" of yours is connected"));
    }
    auto run = it->second->runs.find(report.attempt());
    if (run == it->second->runs.end() || run->second->job != report.job() ||
        std::find(run->second->ranks.begin(), run->second->ranks.end(), report.rank()) ==
            run->second->ranks.end()) {
      return absl::NotFoundError("attempt: the agent runs no such rank now");
    }
    Ranks& r = *run->second;
    r.ended.insert(report.rank());
    if (report.lost() && !r.lost) {
      r.lost =
          absl::StrCat("on agent ", r.agent, ": ",
                       report.reason().empty() ? absl::StrCat("worker ", report.rank(), " lost")
                                               : report.reason());
    }
  }
  cv_.notify_all();
  return absl::OkStatus();
}

bool AgentRegistry::Runs(const std::string& principal, const std::string& job,
                         int64_t attempt) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, s] : sessions_) {
    if (s->principal != principal) continue;
    for (const auto& [a, ranks] : s->runs) {
      if (ranks->job == job && (attempt < 0 || a == attempt)) return true;
    }
  }
  return false;
}

std::optional<std::string> AgentRegistry::DataFilePath(const std::string& principal,
                                                       const std::string& job,
                                                       const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, s] : sessions_) {
    if (s->principal != principal) continue;
    for (const auto& [a, ranks] : s->runs) {
      if (ranks->job != job) continue;
      auto it = ranks->data_files.find(path);
      if (it != ranks->data_files.end()) return it->second;
    }
  }
  return std::nullopt;
}

void AgentRegistry::SetOnChange(std::function<void()> on_change) {
  std::lock_guard<std::mutex> lock(mu_);
  on_change_ = std::move(on_change);
}

void AgentRegistry::Changed() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    f = on_change_;
  }
  if (f) f();
}

}  // namespace ampd::server::agents
