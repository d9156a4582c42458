#include "server/jobs/wire_log.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace ampd::server::jobs {

namespace {
constexpr uint32_t kTraining = 1, kEnded = 2, kDeleted = 4;
}  // namespace

WireLog::~WireLog() {
  for (auto& chunk : chunks_) delete[] chunk.load(std::memory_order_relaxed);
}

void WireLog::Locate(size_t i, int* chunk, size_t* offset) {
  // Chunk k starts at kFirstChunk * (2^k - 1).
  const uint64_t j = static_cast<uint64_t>(i / kFirstChunk) + 1;
  const int k = 63 - __builtin_clzll(j);
  *chunk = k;
  *offset = i - kFirstChunk * ((size_t{1} << k) - 1);
}

void WireLog::Append(grpc::Slice event) {
  const size_t i = size_.load(std::memory_order_relaxed);
  int k;
  size_t offset;
  Locate(i, &k, &offset);
  if (k >= kMaxChunks) {
    // 64 * 2^48 events: not reachable by any job; fail loudly, not silently.
    std::fprintf(stderr, "ampd: a job's event history exceeds the wire log\n");
    std::abort();
  }
  grpc::Slice* chunk = chunks_[k].load(std::memory_order_relaxed);
  if (chunk == nullptr) {
    chunk = new grpc::Slice[kFirstChunk << k];
    chunks_[k].store(chunk, std::memory_order_release);
  }
  chunk[offset] = std::move(event);
  size_.store(i + 1, std::memory_order_release);  // publishes the slot
}

void WireLog::SetState(bool training, bool ended) {
  uint32_t old = state_.load(std::memory_order_relaxed);
  const uint32_t bits = (training ? kTraining : 0) | (ended ? kEnded : 0);
  while (!state_.compare_exchange_weak(old, (old & kDeleted) | bits, std::memory_order_release,
                                       std::memory_order_relaxed)) {
  }
}

void WireLog::MarkDeleted() { state_.fetch_or(kDeleted, std::memory_order_release); }

grpc::Slice WireLog::At(size_t i) const {
  int k;
  size_t offset;
  Locate(i, &k, &offset);
  // The acquire of size_ that made i readable also made this chunk visible.
  return chunks_[k].load(std::memory_order_acquire)[offset];
}

WireLog::Read WireLog::ReadFrom(size_t cursor, size_t max, std::vector<grpc::Slice>* out) const {
  Read r;
  // The state first: once it says ended, the size loaded after it includes
  // every event (the writer appends them before it sets the state).
  const uint32_t state = state_.load(std::memory_order_acquire);
  const size_t end = size();
  r.training = (state & kTraining) != 0;
  r.deleted = (state & kDeleted) != 0;
  if (r.deleted) return r;
  for (size_t i = cursor; i < end && r.count < max; ++i, ++r.count) out->push_back(At(i));
  r.ended = (state & kEnded) != 0 && cursor + r.count >= end;
  return r;
}

}  // namespace ampd::server::jobs
