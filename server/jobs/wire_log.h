#ifndef AMPD_SERVER_JOBS_WIRE_LOG_H_
#define AMPD_SERVER_JOBS_WIRE_LOG_H_

// A job's event history as streams send it: each event serialized once, when
// it is appended, and its bytes (a grpc::Slice, shared by reference count)
// then read by every stream with no lock at all. One writer (the job
// manager, under its own lock) appends and publishes the new size with a
// release store; readers load the size with acquire and read any slot below
// it, which never changes again. So a thousand streams reading a job never
// contend with the training thread that appends to it (the manager's mutex,
// taken per stream read, was what a step paid for its subscribers on a busy
// core).
//
// Storage is a segmented array: chunk k holds kFirstChunk << k slots, so an
// index maps to its chunk and offset in O(1), chunks are never moved, and a
// history of any length needs at most kMaxChunks chunk pointers.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "grpcpp/support/slice.h"

namespace ampd::server::jobs {

class WireLog {
 public:
  WireLog() = default;
  ~WireLog();
  WireLog(const WireLog&) = delete;
  WireLog& operator=(const WireLog&) = delete;

  // Writer side (one thread at a time, the manager's lock held).
  void Append(grpc::Slice event);
  // What a reader needs to know besides the events: whether a worker is
  // training the job, and whether it has ended (then no event follows the
  // ones already appended). Set after the event that changed them.
  void SetState(bool training, bool ended);
  // The job was deleted: readers stop (NOT_FOUND).
  void MarkDeleted();

  // Reader side, from any thread.
  size_t size() const { return size_.load(std::memory_order_acquire); }
  // Requires i < size().
  grpc::Slice At(size_t i) const;
  struct Read {
    size_t count = 0;       // events copied
    bool ended = false;     // the job has ended and nothing is left to read
    bool training = false;  // a worker runs the job
    bool deleted = false;
  };
  // Up to `max` events from `cursor` appended to `out`.
  Read ReadFrom(size_t cursor, size_t max, std::vector<grpc::Slice>* out) const;

  static constexpr size_t kFirstChunk = 64;
  static constexpr int kMaxChunks = 48;

 private:
  static void Locate(size_t i, int* chunk, size_t* offset);

  std::atomic<grpc::Slice*> chunks_[kMaxChunks] = {};
  std::atomic<size_t> size_{0};
  // Bits: 1 training, 2 ended, 4 deleted.
  std::atomic<uint32_t> state_{0};
};

}  // namespace ampd::server::jobs

#endif  // AMPD_SERVER_JOBS_WIRE_LOG_H_
