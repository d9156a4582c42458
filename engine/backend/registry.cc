// The backend registry: one slot per device, filled by each backend's own
// static registration (see backend.h).

#include <array>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernel_registry.h"

namespace ampd::engine {
namespace {

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

std::array<std::array<bool, kNumOps>, kNumDevices>& RegisteredKernels() {
  static std::array<std::array<bool, kNumOps>, kNumDevices> registered{};
  return registered;
}

}  // namespace

bool KernelRegistered(OpId op, Device device) {
  return RegisteredKernels()[static_cast<int>(device)][static_cast<int>(op)];
}

bool IsRegistryOp(OpId op) {
  for (int d = 0; d < kNumDevices; ++d) {
    if (RegisteredKernels()[d][static_cast<int>(op)]) return true;
  }
  return false;
}

bool Backend::HasKernel(OpId op) const {
  return !IsRegistryOp(op) || KernelRegistered(op, device());
}

namespace kernel_registry_internal {
HostMirror& Mirror() {
  static HostMirror mirror;
  return mirror;
}
std::vector<Installer>& CpuKernelMirrors() {
  static std::vector<Installer>* installers = new std::vector<Installer>();
  return *installers;
}
}  // namespace kernel_registry_internal

void MirrorHostKernels(Device device, HostMirror mirror) {
  kernel_registry_internal::Mirror() = mirror;
  for (auto install : kernel_registry_internal::CpuKernelMirrors()) install(device);
}

void MarkKernelRegistered(OpId op, Device device) {
  RegisteredKernels()[static_cast<int>(device)][static_cast<int>(op)] = true;
}

void MissingKernel(OpId op, Device device) {
  std::fprintf(stderr, "ampd: op %s has no %s kernel (the job should have been refused)\n",
               OpName(op), device == Device::kCpu ? "CPU" : "CUDA");
  std::abort();
}

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
