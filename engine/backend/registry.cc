// The backend registry: one slot per device, filled by each backend's own
// static registration (see backend.h).

#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernel_registry.h"
#include "engine/core/error_subject.h"

namespace ampd::engine::backend {

using core::RegisterDeviceMemory;
using core::SubjectError;
using ops::kNumOps;
using ops::OpName;

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

struct Requirement {
  const char* kernel;
  bool (*registered)(Device);
};

std::array<std::vector<Requirement>, kNumOps>& Requirements() {
  static auto* requirements = new std::array<std::vector<Requirement>, kNumOps>();
  return *requirements;
}

}  // namespace

namespace kernel_registry_internal {
void RecordRequirement(OpId op, const char* kernel, bool (*registered)(Device)) {
  std::vector<Requirement>& list = Requirements()[static_cast<int>(op)];
  for (const Requirement& r : list) {
    if (r.registered == registered) return;
  }
  list.push_back({kernel, registered});
}
HostMirror& Mirror() {
  static HostMirror mirror;
  return mirror;
}
std::vector<Installer>& CpuKernelMirrors() {
  static std::vector<Installer>* installers = new std::vector<Installer>();
  return *installers;
}
KernelHooks& Hooks() {
  static KernelHooks hooks;
  return hooks;
}
std::vector<Installer>& KernelWrappers() {
  static std::vector<Installer>* installers = new std::vector<Installer>();
  return *installers;
}
}  // namespace kernel_registry_internal

const char* MissingKernelFor(OpId op, Device device) {
  const std::vector<Requirement>& list = Requirements()[static_cast<int>(op)];
  if (IsViewOp(op)) return "";  // runs no kernel: every device has it
  if (list.empty()) return OpName(op);
  for (const Requirement& r : list) {
    if (!r.registered(device)) return r.kernel;
  }
  return "";
}

bool HasKernel(OpId op, Device device) { return *MissingKernelFor(op, device) == 0; }

bool Backend::HasKernel(OpId op) const { return engine::backend::HasKernel(op, device()); }

void MirrorHostKernels(Device device, HostMirror mirror) {
  kernel_registry_internal::Mirror() = mirror;
  for (auto install : kernel_registry_internal::CpuKernelMirrors()) install(device);
}

void WrapKernels(Device device, KernelHooks hooks) {
  kernel_registry_internal::Hooks() = hooks;
  for (auto install : kernel_registry_internal::KernelWrappers()) install(device);
}

void MissingKernel(const char* kernel, Device device) {
  std::fprintf(stderr, "ampd: kernel %s has no %s version (the job should have been refused)\n",
               kernel, device == Device::kCpu ? "CPU" : "CUDA");
  std::abort();
}

void RegisterBackend(Device device, Backend* backend) {
  Registered()[static_cast<int>(device)] = backend;
  RegisterDeviceMemory(device, backend);
}

absl::StatusOr<Backend*> BackendFor(Device device) {
  Backend* be = Registered()[static_cast<int>(device)];
  if (be == nullptr)
    return SubjectError(absl::StatusCode::kFailedPrecondition, "device", Missing(device));
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

}  // namespace ampd::engine::backend
