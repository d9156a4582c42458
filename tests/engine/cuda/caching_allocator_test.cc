// The device allocator's caching policy, on the CPU with a fake raw
// allocator: reuse without new device allocations, per-stream free lists,
// peak/in-use accounting, and out-of-memory recovery by releasing the cache.

#include "engine/cuda/caching_allocator.h"

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::engine::cuda {
namespace {

struct FakeDevice {
  size_t capacity = size_t{1} << 30;
  size_t used = 0;
  int mallocs = 0, frees = 0;
  std::set<void*> live;

  CachingAllocator::RawOps Ops() {
    return {[this](void** p, size_t bytes) -> std::string {
              if (used + bytes > capacity)
                return "cudaMalloc(" + std::to_string(bytes) + " bytes): out of memory";
              *p = std::malloc(bytes);
              used += bytes;
              ++mallocs;
              live.insert(*p);
              sizes[*p] = bytes;
              return "";
            },
            [this](void* p) {
              used -= sizes[p];
              ++frees;
              live.erase(p);
              std::free(p);
            }};
  }
  std::map<void*, size_t> sizes;
};

void* const kStreamA = reinterpret_cast<void*>(0x1);
void* const kStreamB = reinterpret_cast<void*>(0x2);

TEST(CachingAllocator, RoundsSmallTo512BytesAndLargeTo2MiB) {
  EXPECT_EQ(CachingAllocator::RoundSize(0), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(1 << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((1 << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(CachingAllocator::RoundSize((5 << 20) + 7), size_t{6} << 20);
}

TEST(CachingAllocator, ASteadyTrainingStepMakesNoNewDeviceAllocations) {
  FakeDevice dev;
  CachingAllocator alloc(dev.Ops());
  const std::vector<size_t> step_sizes = {4096, 100, 3 << 20, 4096, 77777, 512};
  auto step = [&] {
    std::vector<void*> ptrs;
    for (size_t s : step_sizes) ptrs.push_back(*alloc.Allocate(s, kStreamA));
    for (void* p : ptrs) alloc.Free(p);
  };
  step();
  const int after_first = dev.mallocs;
  EXPECT_EQ(after_first, static_cast<int>(step_sizes.size()));
  for (int i = 0; i < 50; ++i) step();
  EXPECT_EQ(dev.mallocs, after_first);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.device_allocations, after_first);
  EXPECT_EQ(s.cache_hits, 50 * static_cast<int64_t>(step_sizes.size()));
  EXPECT_EQ(s.in_use_bytes, 0);
  int64_t expected_peak = 0;
  for (size_t sz : step_sizes) expected_peak += CachingAllocator::RoundSize(sz);
  EXPECT_EQ(s.peak_in_use_bytes, expected_peak);
  EXPECT_EQ(s.cached_bytes, expected_peak);
}

TEST(CachingAllocator, BlocksAreReusedOnlyByTheStreamThatFreedThem) {
  FakeDevice dev;
  CachingAllocator alloc(dev.Ops());
  void* a = *alloc.Allocate(1000, kStreamA);
  alloc.Free(a);
  // Another job's stream could run ahead of work still using `a`.
  void* b = *alloc.Allocate(1000, kStreamB);
  EXPECT_NE(a, b);
  void* a2 = *alloc.Allocate(1000, kStreamA);
  EXPECT_EQ(a, a2);
  EXPECT_EQ(dev.mallocs, 2);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  FakeDevice dev;
  dev.capacity = size_t{8} << 20;
  CachingAllocator alloc(dev.Ops());
  void* big = *alloc.Allocate(size_t{6} << 20, kStreamA);
  alloc.Free(big);  // cached, still held on the device
  // 4 MiB does not fit next to the cached 6 MiB: the cache is released.
  absl::StatusOr<void*> p = alloc.Allocate(size_t{4} << 20, kStreamA);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(dev.frees, 1);
  EXPECT_EQ(alloc.stats().cached_bytes, 0);
  // Truly too big: a clear RESOURCE_EXHAUSTED with the sizes and the device error.
  absl::StatusOr<void*> q = alloc.Allocate(size_t{16} << 20, kStreamA);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(q.status().message().find("16777216 bytes"), std::string::npos) << q.status();
  EXPECT_NE(q.status().message().find("out of memory"), std::string::npos) << q.status();
  alloc.Free(*p);
}

TEST(CachingAllocator, DestructionReturnsCachedBlocksAndForeignPointersAreIgnored) {
  FakeDevice dev;
  {
    CachingAllocator alloc(dev.Ops());
    void* a = *alloc.Allocate(10, kStreamA);
    void* b = *alloc.Allocate(20 << 20, kStreamA);
    alloc.Free(a);
    alloc.Free(b);
    int not_ours = 0;
    alloc.Free(&not_ours);  // never handed out: never reused
    EXPECT_EQ(alloc.stats().in_use_bytes, 0);
    alloc.ResetPeak();
    EXPECT_EQ(alloc.stats().peak_in_use_bytes, 0);
  }
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(dev.used, 0u);
}

}  // namespace
}  // namespace ampd::engine::cuda
