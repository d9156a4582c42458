#ifndef AMPD_ENGINE_DIST_PROCESS_GROUP_H_
#define AMPD_ENGINE_DIST_PROCESS_GROUP_H_

// The workers of one data-parallel job: a rank in a world of `size`, and the
// collectives its training step needs, through the field's own libraries
// (Gloo on CPUs, nccl_process_group.h on GPUs) rather than a home-made transport.
// Every collective must be called by every rank, in the same order. Failures
// (a peer that never arrives or dies) are Status errors naming the rank, never
// an exception or an abort: a worker reports them and its job restarts.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ampd::engine::dist {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether the collectives take device memory (NCCL) rather than host
  // memory (Gloo).
  virtual bool device_memory() const { return false; }
  // data[0..n) = the element-wise sum (max) over the ranks, on every rank.
  virtual absl::Status AllReduceSum(float* data, int64_t n) = 0;
  virtual absl::Status AllReduceMax(float* data, int64_t n) = 0;
  // data[0..n) = rank `root`'s, on every rank (DDP's buffer broadcast).
  virtual absl::Status Broadcast(float* data, int64_t n, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // Collectives that overlap the caller's device work (DDP's buckets during
  // the backward), where overlaps_device_work() (NCCL): each returns once
  // queued on the group's own stream. Elsewhere UNIMPLEMENTED.
  virtual bool overlaps_device_work() const { return false; }
  struct DeviceBuffer {
    float* data;
    int64_t n;
  };
  // Waits (on the device) for `ready`, a marker of the caller's stream
  // (Backend::MarkStream), then sums each buffer over the ranks in place, as
  // one group. The caller leaves the buffers alone until its stream has
  // waited for a later RecordDone.
  virtual absl::Status AllReduceSumAfter(void* ready, const std::vector<DeviceBuffer>& buffers) {
    return absl::UnimplementedError("this process group does not overlap device work");
  }
  // A marker of everything queued on the group's stream (valid until the
  // next call), for the caller's stream to wait on (Backend::WaitForMarker).
  virtual absl::StatusOr<void*> RecordDone() {
    return absl::UnimplementedError("this process group does not overlap device work");
  }
  // Once the caller has waited for its stream (which waited for the last
  // RecordDone): the device seconds the AllReduceSumAfter groups since the
  // previous call took, and the seconds from `since` (a marker of the
  // caller's stream) to the last RecordDone, which the caller's stream
  // waited for after it.
  virtual absl::Status TakeTimes(void* since, double* collective_s, double* tail_s) {
    return absl::UnimplementedError("this process group does not overlap device work");
  }
};

// The rendezvous of a Gloo group: each rank publishes its address under
// `prefix` and reads the others'. Abstract so that the server's key-value
// store can stand behind it (ranks on other machines reach it over gRPC:
// server/agents/), without gRPC in the engine; tests use the in-process one.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The value, once some rank has set it; DEADLINE_EXCEEDED after `timeout`.
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          std::chrono::milliseconds timeout) = 0;
};
// A store shared by ranks that are threads of one process (tests, benches).
std::shared_ptr<RendezvousStore> InProcessStore();
// A store in a directory that every rank can reach (ranks that are
// processes of one machine); the directory is made if missing.
absl::StatusOr<std::shared_ptr<RendezvousStore>> FileStore(const std::string& directory);

struct GlooOptions {
  int rank = 0;
  int size = 1;
  std::shared_ptr<RendezvousStore> store;
  std::string prefix = "ampd";               // keeps jobs (and restarts) apart in one store
  std::string hostname = "127.0.0.1";        // the address this rank listens on
  std::chrono::milliseconds timeout{30000};  // connecting, and each collective
};

// Connects to every other rank (full mesh over TCP). DEADLINE_EXCEEDED or
// UNAVAILABLE when the others do not all arrive within the timeout;
// INVALID_ARGUMENT for a rank outside [0, size) or no store.
absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectGloo(const GlooOptions& options);

}  // namespace ampd::engine::dist

#endif  // AMPD_ENGINE_DIST_PROCESS_GROUP_H_
