#include "server/jobs/persister.h"

#include <utility>

#include "server/log.h"

namespace ampd::server::jobs {

Persister::Persister(JobStore* store, PersisterHooks hooks, std::chrono::milliseconds interval)
    : store_(store), hooks_(std::move(hooks)), interval_(interval) {
  thread_ = std::thread([this] { Loop(); });
}

Persister::~Persister() { Stop(); }

void Persister::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_);
    FlushLocked();
  }
}

void Persister::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  FlushLocked();
}

void Persister::FlushLocked() {
  for (const PendingWrite& w : hooks_.collect()) {
    absl::Status s = store_->AppendEvents(w.id, w.first_index, w.events);
    if (s.ok()) s = store_->PutJob(w.job, w.sequence);
    if (!s.ok()) {
      ++failed_writes_;
      LogError("cannot save job to the store; will retry",
               {{"job", w.id}, {"error", std::string(s.message())}});
      hooks_.failed(w);
    } else if (hooks_.written) {
      hooks_.written(w);
    }
  }
}

absl::Status Persister::DeleteJob(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return store_->DeleteJob(id);
}

void Persister::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Flush();
}

int64_t Persister::failed_writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_writes_;
}

}  // namespace ampd::server::jobs
