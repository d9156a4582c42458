// The CPU backend's instance and its registration; the kernels are in one
// file per family (see cpu_backend_impl.h).

#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/cpu_backend_impl.h"

namespace ampd::engine {

Backend& CpuBackend() {
  static cpu::CpuBackendImpl* backend = new cpu::CpuBackendImpl();
  return *backend;
}

namespace {
// The CPU backend registers itself like every other backend (this target is
// alwayslink, so linking it is enough).
[[maybe_unused]] const bool kRegistered = (RegisterBackend(Device::kCpu, &CpuBackend()), true);
}  // namespace

}  // namespace ampd::engine
