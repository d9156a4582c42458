#ifndef AMPD_ENGINE_CPU_CPU_BACKEND_H_
#define AMPD_ENGINE_CPU_CPU_BACKEND_H_

// The CPU backend (oneDNN GEMMs, vectorised loops over OpenMP threads). It is
// also the reference every other backend is tested against. Jobs reach it
// through the registry (BackendFor(Device::kCpu)); tests and benchmarks that
// compare a device with the CPU call it directly.

#include "engine/backend/backend.h"

namespace ampd::engine::cpu {

backend::Backend& CpuBackend();

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_CPU_BACKEND_H_
