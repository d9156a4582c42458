#include "engine/dist/nccl_connector.h"

#include <mutex>

namespace ampd::engine::dist {
namespace {

std::mutex& Mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
NcclImplementation& Registered() {
  static auto* impl = new NcclImplementation;
  return *impl;
}

}  // namespace

void RegisterNccl(const NcclImplementation& implementation) {
  std::lock_guard<std::mutex> lock(Mu());
  Registered() = implementation;
}

bool NcclRegistered() {
  std::lock_guard<std::mutex> lock(Mu());
  return Registered().connect != nullptr;
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectNcclGroup(const NcclOptions& options) {
  NcclImplementation impl;
  {
    std::lock_guard<std::mutex> lock(Mu());
    impl = Registered();
  }
  if (impl.connect == nullptr) {
    return absl::UnimplementedError("this binary was linked without NCCL");
  }
  return impl.connect(options);
}

int NcclDeviceCount() {
  NcclImplementation impl;
  {
    std::lock_guard<std::mutex> lock(Mu());
    impl = Registered();
  }
  int count = 0;
  std::string name;
  if (impl.devices == nullptr || !impl.devices(&count, &name).ok()) return 0;
  return count;
}

}  // namespace ampd::engine::dist
