#ifndef AMPD_ENGINE_DIST_NCCL_PROCESS_GROUP_H_
#define AMPD_ENGINE_DIST_NCCL_PROCESS_GROUP_H_

// ProcessGroup over NCCL (with the CUDA toolkit): the GPUs' collective
// library, as PyTorch's DDP uses it. Its collectives take DEVICE memory
// (cudaMalloc, on the group's device), so a trainer reduces gradients where
// they are. Rank 0 makes NCCL's unique id and hands it to the others through
// the same RendezvousStore Gloo's ranks meet in (the server's, or a
// directory): no other port or service. In a build without CUDA,
// ConnectNccl is UNIMPLEMENTED, saying so. Linking this library registers
// it with nccl_connector.h (ConnectNcclGroup), for the server's use.

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/dist/nccl_connector.h"
#include "engine/dist/process_group.h"

namespace ampd::engine::dist {

class NcclProcessGroup : public ProcessGroup {
 public:
  ~NcclProcessGroup() override = default;
  bool device_memory() const override { return true; }
  bool overlaps_device_work() const override { return true; }
  // Device buffers and copies on this group's device (tests; small host
  // values such as a step's loss).
  virtual absl::StatusOr<float*> Alloc(int64_t n) = 0;
  virtual void Free(float* device_ptr) = 0;
  virtual absl::Status ToDevice(float* device_dst, const float* host_src, int64_t n) = 0;
  virtual absl::Status ToHost(float* host_dst, const float* device_src, int64_t n) = 0;
};

bool NcclAvailable();
// The CUDA devices here: their number and the first one's name (UNAVAILABLE
// with the reason when there are none usable).
absl::Status NcclDevices(int* count, std::string* first_name);
absl::StatusOr<std::unique_ptr<NcclProcessGroup>> ConnectNccl(const NcclOptions& options);

}  // namespace ampd::engine::dist

#endif  // AMPD_ENGINE_DIST_NCCL_PROCESS_GROUP_H_
