#ifndef AMPD_ENGINE_DIST_NCCL_CONNECTOR_H_
#define AMPD_ENGINE_DIST_NCCL_CONNECTOR_H_

// NCCL for code that must not link it: the server and its worker processes
// are built once and linked with an NCCL implementation by the binary
// (//server:ampd links //engine/dist:nccl, //tests/server:ampd_emu the CUDA
// emulator's stand-in), which registers itself here, as backends register
// their kernels. Without one, connecting is UNIMPLEMENTED, saying so.

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/dist/process_group.h"

namespace ampd::engine::dist {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // the CUDA device this rank uses
  std::shared_ptr<RendezvousStore> store;
  std::string prefix = "ampd";
  std::chrono::milliseconds timeout{30000};  // waiting for rank 0's id
};

struct NcclImplementation {
  absl::StatusOr<std::unique_ptr<ProcessGroup>> (*connect)(const NcclOptions& options) = nullptr;
  // The CUDA devices NCCL can use here (UNAVAILABLE with why when none).
  absl::Status (*devices)(int* count, std::string* first_name) = nullptr;
};

void RegisterNccl(const NcclImplementation& implementation);
bool NcclRegistered();

// The registered implementation's group; UNIMPLEMENTED when none is linked.
absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectNcclGroup(const NcclOptions& options);
// The CUDA devices here, through the registered implementation; 0 without one.
int NcclDeviceCount();

}  // namespace ampd::engine::dist

#endif  // AMPD_ENGINE_DIST_NCCL_CONNECTOR_H_
