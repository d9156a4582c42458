// The CPU backend's instance and its registration; the kernels are in one
// file per family (see cpu_backend_impl.h).

#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/cpu_backend_impl.h"

namespace ampd::engine::cpu {

using backend::Backend;
using backend::RegisterBackend;

CpuBackendImpl& CpuBackendImpl::Instance() {
  static CpuBackendImpl* backend = new CpuBackendImpl();
  return *backend;
}

Backend& CpuBackend() { return CpuBackendImpl::Instance(); }

namespace {
// The CPU backend registers itself like every other backend (this target is
// alwayslink, so linking it is enough).
[[maybe_unused]] const bool kRegistered = (RegisterBackend(Device::kCpu, &CpuBackend()), true);
}  // namespace

}  // namespace ampd::engine::cpu
