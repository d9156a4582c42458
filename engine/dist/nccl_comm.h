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
// Copies between the host and the communicator's device (tests, and small
// host values such as a step's loss).
std::string ToDevice(Comm* comm, float* device_dst, const float* host_src, int64_t n);
std::string ToHost(Comm* comm, float* host_dst, const float* device_src, int64_t n);
std::string DeviceAlloc(Comm* comm, float** device_ptr, int64_t n);
void DeviceFree(Comm* comm, float* device_ptr);
void Destroy(Comm* comm);

}  // namespace ampd::engine::dist::nccl

#endif  // AMPD_ENGINE_DIST_NCCL_COMM_H_
