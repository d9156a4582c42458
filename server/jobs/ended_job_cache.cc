#include "server/jobs/ended_job_cache.h"

namespace ampd::server::jobs {

namespace {
// What an entry costs beyond its payload: the map node, the list node, the
// key and the shared_ptr control block, roughly.
constexpr size_t kEntryOverhead = 160;
}  // namespace

EndedJobCache::Entry* EndedJobCache::Touch(const Key& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second;
}

std::shared_ptr<const StoredJob> EndedJobCache::Job(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Touch({id, -1});
  return e ? e->job : nullptr;
}

void EndedJobCache::PutJob(std::shared_ptr<const StoredJob> job) {
  Entry e;
  e.bytes = kEntryOverhead + job->job.SpaceUsedLong() + job->job.id().size();
  e.job = std::move(job);
  const std::string id = e.job->job.id();
  Put({id, -1}, std::move(e));
}

std::shared_ptr<const EndedJobCache::Page> EndedJobCache::GetPage(const std::string& id,
                                                                  int64_t page) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = Touch({id, page});
  return e ? e->page : nullptr;
}

void EndedJobCache::PutPage(const std::string& id, int64_t page,
                            std::shared_ptr<const Page> events) {
  Entry e;
  e.bytes = kEntryOverhead + id.size() + events->capacity() * sizeof(grpc::Slice);
  for (const grpc::Slice& s : *events) e.bytes += s.size() + 32;  // + the slice's refcount block
  e.page = std::move(events);
  Put({id, page}, std::move(e));
}

void EndedJobCache::Put(const Key& key, Entry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) EraseLocked(it);
  if (entry.bytes > capacity_) return;  // would evict everything else for nothing
  lru_.push_front(key);
  entry.lru = lru_.begin();
  bytes_ += entry.bytes;
  entries_.emplace(key, std::move(entry));
  while (bytes_ > capacity_ && !lru_.empty()) EraseLocked(entries_.find(lru_.back()));
}

void EndedJobCache::EraseLocked(std::map<Key, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void EndedJobCache::Forget(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.lower_bound({id, INT64_MIN});
  while (it != entries_.end() && it->first.first == id) EraseLocked(it++);
}

size_t EndedJobCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t EndedJobCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace ampd::server::jobs
