#ifndef AMPD_SERVER_JOBS_ENDED_JOB_CACHE_H_
#define AMPD_SERVER_JOBS_ENDED_JOB_CACHE_H_

// What the job manager keeps in memory of jobs that have ended and are safely
// in the store: their records and pages of their histories, least recently
// used first out, within a byte budget (ampd's --ended_job_cache_mib). Their
// home is the store; this only saves re-reading what streams and GetJob ask
// for again and again. Thread-safe; entries are immutable (an ended job's
// record and history no longer change), shared with their readers.

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/support/slice.h"
#include "server/job_store.h"

namespace ampd::server::jobs {

class EndedJobCache {
 public:
  // Events per history page: a stream replaying an ended job reads the store
  // once per page.
  static constexpr int64_t kPageEvents = 256;
  using Page = std::vector<grpc::Slice>;  // serialized MetricsEvents

  explicit EndedJobCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The job's record (history not included; event_count set), or null.
  std::shared_ptr<const StoredJob> Job(const std::string& id);
  void PutJob(std::shared_ptr<const StoredJob> job);
  // Events [page * kPageEvents, ...) of the job's history, or null.
  std::shared_ptr<const Page> GetPage(const std::string& id, int64_t page);
  void PutPage(const std::string& id, int64_t page, std::shared_ptr<const Page> events);
  // Drops everything of the job (it was deleted).
  void Forget(const std::string& id);

  size_t bytes() const;
  size_t entries() const;

 private:
  using Key = std::pair<std::string, int64_t>;  // job id; page, or -1 for the record
  struct Entry {
    std::shared_ptr<const StoredJob> job;
    std::shared_ptr<const Page> page;
    size_t bytes = 0;
    std::list<Key>::iterator lru;
  };
  Entry* Touch(const Key& key);  // under mu_
  void Put(const Key& key, Entry entry);
  void EraseLocked(std::map<Key, Entry>::iterator it);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  std::list<Key> lru_;  // most recently used first
  size_t bytes_ = 0;
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_ENDED_JOB_CACHE_H_
