#include "server/jobs/local_workers.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace ampd::server::jobs {
namespace {

// The last non-empty line of a worker's log: what it said before it ended.
std::string LastLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalWorkers>> LocalWorkers::Start(Options options) {
  std::unique_ptr<LocalWorkers> w(new LocalWorkers(std::move(options)));
  const Options& o = w->options_;
  std::vector<std::string> common;
  for (char** e = environ; *e != nullptr; ++e) common.emplace_back(*e);
  common.insert(common.end(), o.env.begin(), o.env.end());

  std::vector<int> ranks = o.ranks;
  for (int r = 1; ranks.empty() && r < o.world_size; ++r) ranks.push_back(r);
  for (int rank : ranks) {
    // The rank's own entries replace the server's of the same name.
    std::vector<std::string> env;
    if (o.rank_env) env = o.rank_env(rank);
    const size_t own = env.size();
    for (const std::string& e : common) {
      const std::string name = e.substr(0, e.find('=') + 1);
      bool replaced = false;
      for (size_t i = 0; i < own; ++i) replaced |= env[i].compare(0, name.size(), name) == 0;
      if (!replaced) env.push_back(e);
    }
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = {o.binary, "worker"};
    args.insert(args.end(), o.args.begin(), o.args.end());
    args.push_back(absl::StrCat("--rank=", rank));
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = absl::StrCat(o.log_dir, "/worker-", rank, ".log");

    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // The server blocks SIGTERM/SIGINT in its threads (sigwait); a worker
    // must not inherit that, or it could not be stopped.
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGTERM, SIGINT, SIGPIPE, SIGHUP}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    const int err = posix_spawn(&pid, o.binary.c_str(), &files, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    if (err != 0) {
      w->Kill();
      return absl::InternalError(
          absl::StrCat("cannot start worker ", rank, " (", o.binary, "): ", std::strerror(err)));
    }
    std::lock_guard<std::mutex> lock(w->mu_);
    w->children_.push_back(Child{rank, pid, false});
  }
  w->monitor_ = std::thread([raw = w.get()] { raw->Monitor(); });
  return w;
}

LocalWorkers::~LocalWorkers() {
  Kill();
  quit_ = true;
  if (monitor_.joinable()) monitor_.join();
}

std::string LocalWorkers::Describe(const Child& c, int status) const {
  std::string what;
  if (WIFSIGNALED(status)) {
    what = absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  } else {
    what = absl::StrCat("exited with status ", WEXITSTATUS(status));
  }
  std::string out = absl::StrCat("worker ", c.rank, " (pid ", c.pid, ") ", what);
  const std::string said = LastLine(absl::StrCat(options_.log_dir, "/worker-", c.rank, ".log"));
  if (!said.empty() && !WIFSIGNALED(status)) absl::StrAppend(&out, ": ", said);
  return out;
}

void LocalWorkers::Monitor() {
  // Polls rather than blocking in waitpid: a blocked waitpid could not be
  // told to stop, and a few milliseconds are nothing next to a restart.
  while (true) {
    std::function<void(const std::string&)> notify;
    std::string reason;
    std::vector<std::tuple<int, bool, std::string>> exits;
    bool all_ended = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Child& c : children_) {
        if (c.ended) continue;
        int status = 0;
        const pid_t r = waitpid(c.pid, &status, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) {
          all_ended = false;
          continue;
        }
        c.ended = true;
        ended_cv_.notify_all();
        const bool clean = r == c.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        const std::string why =
            r == c.pid ? Describe(c, status)
                       : absl::StrCat("worker ", c.rank, " (pid ", c.pid, ") vanished");
        if (!stopping_) exits.emplace_back(c.rank, !clean, why);
        if (!clean && !stopping_ && !lost_) {
          lost_ = why;
          notify = options_.on_lost;
          reason = *lost_;
        }
      }
    }
    if (notify) notify(reason);
    if (options_.on_exit) {
      for (const auto& [rank, lost, why] : exits) options_.on_exit(rank, lost, why);
    }
    if ((all_ended && !children_.empty()) || quit_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string LocalWorkers::Finish(std::chrono::milliseconds grace) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    ended_cv_.wait_for(lock, grace, [this] {
      for (const Child& c : children_) {
        if (!c.ended) return false;
      }
      return true;
    });
  }
  Kill();
  std::lock_guard<std::mutex> lock(mu_);
  return lost_.value_or("");
}

void LocalWorkers::Kill() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  for (const Child& c : children_) {
    if (!c.ended) kill(c.pid, SIGKILL);
  }
  if (!monitor_.joinable()) {
    // Start failed before the monitor ran: reap here.
    for (Child& c : children_) {
      if (!c.ended) waitpid(c.pid, nullptr, 0);
      c.ended = true;
    }
    return;
  }
  ended_cv_.wait(lock, [this] {
    for (const Child& c : children_) {
      if (!c.ended) return false;
    }
    return true;
  });
}

std::optional<std::string> LocalWorkers::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

std::string LocalWorkers::Where() const {
  std::vector<std::string> pids;
  for (pid_t p : this->pids()) pids.push_back(std::to_string(p));
  return absl::StrCat("worker processes (pids ", absl::StrJoin(pids, ", "), ")");
}

std::vector<pid_t> LocalWorkers::pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<pid_t> out;
  for (const Child& c : children_) out.push_back(c.pid);
  return out;
}

}  // namespace ampd::server::jobs
