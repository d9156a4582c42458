#ifndef AMPD_SERVER_JOBS_PERSISTER_H_
#define AMPD_SERVER_JOBS_PERSISTER_H_

// Writes jobs to the store: every `interval` on its own thread, at once when
// asked (an acknowledged CreateJob, a checkpoint that must not get ahead of
// the history), and a last time at Stop. A failed write is retried at the
// next flush; store writes never run on a training thread's critical path
// and never overlap each other (a delete waits for a flush in progress).
// What changed is the job manager's to say (hooks), so records stay there.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "ampd/v1/training_service.pb.h"
#include "server/job_store.h"

namespace ampd::server::jobs {

// One job's changes since the last flush.
struct PendingWrite {
  std::string id;
  ampd::v1::Job job;
  int64_t sequence = 0;
  size_t first_index = 0;  // of `events` in the job's history
  std::vector<ampd::v1::MetricsEvent> events;
};

struct PersisterHooks {
  // What changed since the last flush, marked as written.
  std::function<std::vector<PendingWrite>()> collect;
  // The write of `w` failed: mark it unwritten again (from w.first_index).
  std::function<void(const PendingWrite& w)> failed;
  // `w` is in the store now (optional): what only lives there from now on
  // may leave memory.
  std::function<void(const PendingWrite& w)> written;
};

class Persister {
 public:
  Persister(JobStore* store, PersisterHooks hooks, std::chrono::milliseconds interval);
  ~Persister();
  Persister(const Persister&) = delete;
  Persister& operator=(const Persister&) = delete;

  // Writes what changed now, on the calling thread.
  void Flush();
  absl::Status DeleteJob(const std::string& id);
  // Stops the periodic thread, then flushes once more. Idempotent.
  void Stop();
  int64_t failed_writes() const;

 private:
  void FlushLocked();
  void Loop();

  JobStore* const store_;
  const PersisterHooks hooks_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;  // serialises store writes
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t failed_writes_ = 0;
  std::thread thread_;
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_PERSISTER_H_
