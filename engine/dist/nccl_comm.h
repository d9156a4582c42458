#ifndef AMPD_ENGINE_DIST_NCCL_COMM_H_
#define AMPD_ENGINE_DIST_NCCL_COMM_H_

// NCCL's communicator in plain C++ (no CUDA or NCCL types), as
// engine/cuda/runtime.h does for the runtime: only nccl_comm.cu includes
// <nccl.h>, and the CPU emulator compiles it against its own stand-in.
// Every call returns "" on success, else what failed ("ncclAllReduce:
// unhandled cuda error"). Pointers given to the collectives are device
// memory (cudaMalloc) of the communicator's device; each collective runs on
// the communicator's own stream and returns once it has completed there.

#include <cstdint>
#include <string>

namespace ampd::engine::dist::nccl {

// Whether this build has NCCL (false: every call below says so).
bool Available();
// The CUDA devices NCCL can use: their number, and the first one's name.
std::string Devices(int* count, std::string* first_name);

// A new communicator's id (NCCL's unique id bytes), made by one rank and
// given to the others.
std::string GetUniqueId(std::string* id);

struct Comm;  // one rank's communicator, its stream and scratch memory
// Blocks until all `size` ranks have called it with the same id.
std::string Init(int device, int size, int rank, const std::string& id, Comm** comm);
std::string AllReduce(Comm* comm, float* device_data, int64_t n, bool max);
std::string Broadcast(Comm* comm, float* device_data, int64_t n, int root);
std::string Barrier(Comm* comm);  // an all-reduce of one float
// Overlapped collectives (these return once queued, not completed): a wait,
// on the communicator's stream, for `ready` (a cudaEvent_t recorded on
// another stream of the device; null: none), then a sum all-reduce of each
// of the `count` buffers data[i][0..n[i]), as one NCCL group, timed.
std::string AllReduceSumAfter(Comm* comm, void* ready, float* const* data, const int64_t* n,
                              int count);
// A timed event recorded now on the communicator's stream (reused by the
// next call), for another stream to wait on.
std::string RecordDone(Comm* comm, void** done);
// Once the host has waited for the work they cover: the device time of the
// AllReduceSumAfter groups since the previous call (ms, summed), and from
// `since` (a timed event recorded on another stream; null: none) to the
// last RecordDone.
std::string TakeTimes(Comm* comm, void* since, float* collective_ms, float* tail_ms);
// Copies between the host and the communicator's device (tests, and small
// host values such as a step's loss).
std::string ToDevice(Comm* comm, float* device_dst, const float* host_src, int64_t n);
std::string ToHost(Comm* comm, float* host_dst, const float* device_src, int64_t n);
std::string DeviceAlloc(Comm* comm, float** device_ptr, int64_t n);
void DeviceFree(Comm* comm, float* device_ptr);
void Destroy(Comm* comm);

}  // namespace ampd::engine::dist::nccl

#endif  // AMPD_ENGINE_DIST_NCCL_COMM_H_
