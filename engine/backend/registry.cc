// The backend registry: one slot per device, filled by each backend's own
// static registration (see backend.h).

#include <array>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "engine/backend/backend.h"

namespace ampd::engine {
namespace {

constexpr int kNumDevices = static_cast<int>(Device::kCuda) + 1;

std::array<Backend*, kNumDevices>& Registered() {
  static std::array<Backend*, kNumDevices> registered{};
  return registered;
}

const char* Missing(Device device) {
  return device == Device::kCpu
             ? "no CPU backend is linked into this program (depend on //engine/cpu)"
             : "no CUDA backend is linked into this program (built with --config=cpu or "
               "without the CUDA toolkit)";
}

}  // namespace

void RegisterBackend(Device device, Backend* backend) {
  Registered()[static_cast<int>(device)] = backend;
  RegisterDeviceMemory(device, backend);
}

absl::StatusOr<Backend*> BackendFor(Device device) {
  Backend* be = Registered()[static_cast<int>(device)];
  if (be == nullptr) return SubjectError(absl::StatusCode::kFailedPrecondition, "device", Missing(device));
  if (absl::Status ready = be->Ready(); !ready.ok()) {
    return SubjectError(absl::StatusCode::kFailedPrecondition, "device",
                        absl::StrCat(device == Device::kCpu ? "the CPU" : "CUDA",
                                     " is not usable here: ", ready.message()));
  }
  return be;
}

Backend& BackendOf(const Tensor& t) {
  Backend* be = Registered()[static_cast<int>(t.device())];
  if (be == nullptr) {
    std::fprintf(stderr, "ampd: a tensor on a device with no backend: %s\n", Missing(t.device()));
    std::abort();
  }
  return *be;
}

}  // namespace ampd::engine
