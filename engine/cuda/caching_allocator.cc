#include "engine/cuda/caching_allocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ampd::engine::cuda {

CachingAllocator::CachingAllocator(RawOps raw) : raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseCachedLocked();
}

size_t CachingAllocator::RoundSize(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kSmallLimit = size_t{1} << 20;
  bytes = std::max<size_t>(bytes, 1);
  const size_t unit = bytes <= kSmallLimit ? kSmall : kLarge;
  return (bytes + unit - 1) / unit * unit;
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes, void* stream) {
  const size_t size = RoundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find({stream, size});
  void* p = nullptr;
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= static_cast<int64_t>(size);
    ++stats_.cache_hits;
  } else {
    std::string err = raw_.allocate(&p, size);
    if (!err.empty()) {
      // Out of memory (or fragmented by the cache): give the cache back, retry once.
      ReleaseCachedLocked();
      err = raw_.allocate(&p, size);
      if (!err.empty()) {
        return absl::ResourceExhaustedError(absl::StrCat("device memory: could not allocate ",
                                                         bytes, " bytes with ", stats_.in_use_bytes,
                                                         " bytes in use: ", err));
      }
    }
    ++stats_.device_allocations;
  }
  live_[p] = Block{size, stream};
  stats_.in_use_bytes += static_cast<int64_t>(size);
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return p;
}

void CachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours: never hand it out again
  const Block b = it->second;
  live_.erase(it);
  stats_.in_use_bytes -= static_cast<int64_t>(b.size);
  stats_.cached_bytes += static_cast<int64_t>(b.size);
  free_[{b.stream, b.size}].push_back(p);
}

void CachingAllocator::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseCachedLocked();
}

void CachingAllocator::ReleaseCachedLocked() {
  for (auto& [key, blocks] : free_) {
    for (void* p : blocks) raw_.release(p);
  }
  free_.clear();
  stats_.cached_bytes = 0;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

}  // namespace ampd::engine::cuda
