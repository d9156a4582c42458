#ifndef AMPD_SERVER_JOBS_JOB_QUEUE_H_
#define AMPD_SERVER_JOBS_JOB_QUEUE_H_

// The queue of jobs waiting for a worker, with its limits: highest priority
// first, then the order of submission. Not thread-safe: the job manager holds
// its lock around every call.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace ampd::server::jobs {

struct QueueLimits {
  int max_jobs = 1000;               // --max_queued_jobs
  int max_jobs_per_principal = 100;  // --max_queued_jobs_per_principal
};

class JobQueue {
 public:
  explicit JobQueue(QueueLimits limits) : limits_(limits) {}

  // OK when `owner` may queue one more job; else RESOURCE_EXHAUSTED with the
  // limit as its subject ("max_queued_jobs_per_principal", "max_queued_jobs").
  absl::Status CheckAdmission(const std::string& owner) const;
  // `sequence` orders jobs of equal priority (smaller first); ids are unique.
  void Push(const std::string& id, const std::string& owner, int64_t priority, int64_t sequence);
  // The next job to run, removed from the queue; nullopt when empty.
  std::optional<std::string> Pop();
  // The next job to run, left in the queue. Not on an empty queue.
  const std::string& Front() const { return entries_.begin()->second.id; }
  // Removes a queued job (cancelled); false when it was not queued.
  bool Remove(const std::string& id);
  // 0 = next to run; -1 when not queued.
  int Position(const std::string& id) const;
  // Queued ids in the order they will run.
  std::vector<std::string> Ids() const;
  int QueuedBy(const std::string& owner) const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void Clear() { entries_.clear(); }

 private:
  struct Entry {
    std::string id;
    std::string owner;
  };
  QueueLimits limits_;
  // (-priority, sequence) -> job.
  std::map<std::pair<int64_t, int64_t>, Entry> entries_;
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_JOB_QUEUE_H_
