#ifndef AMPD_ENGINE_CUDA_CACHING_ALLOCATOR_H_
#define AMPD_ENGINE_CUDA_CACHING_ALLOCATOR_H_

// A caching allocator for device memory, so a training step never calls
// cudaMalloc once the first step has sized its working set (cudaMalloc and
// cudaFree synchronise the device and cost tens of microseconds each).
//
// Sizes round up to 512 bytes (small) or 2 MiB (large) and freed blocks go to
// a free list for that rounded size and the stream that freed them: a block
// is only reused by work queued on the same stream, which runs after the
// work that last used it (each job has its own stream), so no event waits are
// needed. When the device is out of memory the cache is released and the
// allocation retried once. Plain C++: the raw allocator is injected, so the
// policy is tested on the CPU.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace ampd::engine::cuda {

struct AllocatorStats {
  int64_t in_use_bytes = 0;        // handed out now (rounded sizes)
  int64_t peak_in_use_bytes = 0;   // high-water mark of in_use_bytes
  int64_t cached_bytes = 0;        // held in free lists
  int64_t device_allocations = 0;  // raw allocations made (cudaMalloc calls)
  int64_t cache_hits = 0;
};

class CachingAllocator {
 public:
  struct RawOps {
    // "" on success, else the error (e.g. "cudaMalloc(...): out of memory").
    std::function<std::string(void** p, size_t bytes)> allocate;
    std::function<void(void* p)> release;
  };
  explicit CachingAllocator(RawOps raw);
  ~CachingAllocator();

  // RESOURCE_EXHAUSTED with the request, the in-use bytes and the device error.
  absl::StatusOr<void*> Allocate(size_t bytes, void* stream);
  void Free(void* p);
  // Returns every cached block to the device.
  void ReleaseCached();
  AllocatorStats stats() const;
  void ResetPeak();

  static size_t RoundSize(size_t bytes);

 private:
  struct Block {
    size_t size;
    void* stream;
  };
  void ReleaseCachedLocked();

  RawOps raw_;
  mutable std::mutex mu_;
  std::map<std::pair<void*, size_t>, std::vector<void*>> free_;  // (stream, size) -> blocks
  std::unordered_map<void*, Block> live_;
  AllocatorStats stats_;
};

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_CACHING_ALLOCATOR_H_
