#include "server/jobs/job_queue.h"

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"

namespace ampd::server::jobs {

absl::Status JobQueue::CheckAdmission(const std::string& owner) const {
  const int by_owner = QueuedBy(owner);
  if (by_owner >= limits_.max_jobs_per_principal) {
    return engine::core::SubjectError(absl::StatusCode::kResourceExhausted,
                                      "max_queued_jobs_per_principal",
                                      absl::StrCat(owner.empty() ? "you" : owner, " already have ",
                                                   by_owner, " queued jobs (the limit)"));
  }
  if (static_cast<int>(entries_.size()) >= limits_.max_jobs) {
    return engine::core::SubjectError(
        absl::StatusCode::kResourceExhausted, "max_queued_jobs",
        absl::StrCat("the queue already holds ", entries_.size(), " jobs (the limit)"));
  }
  return absl::OkStatus();
}

void JobQueue::Push(const std::string& id, const std::string& owner, int64_t priority,
                    int64_t sequence) {
  entries_[{-priority, sequence}] = Entry{id, owner};
}

std::optional<std::string> JobQueue::Pop() {
  if (entries_.empty()) return std::nullopt;
  std::string id = entries_.begin()->second.id;
  entries_.erase(entries_.begin());
  return id;
}

bool JobQueue::Remove(const std::string& id) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.id == id) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

int JobQueue::Position(const std::string& id) const {
  int position = 0;
  for (const auto& [key, e] : entries_) {
    if (e.id == id) return position;
    ++position;
  }
  return -1;
}

std::vector<std::string> JobQueue::Ids() const {
  std::vector<std::string> out;
  for (const auto& [key, e] : entries_) out.push_back(e.id);
  return out;
}

int JobQueue::QueuedBy(const std::string& owner) const {
  int n = 0;
  for (const auto& [key, e] : entries_) n += e.owner == owner;
  return n;
}

}  // namespace ampd::server::jobs
