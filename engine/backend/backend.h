#ifndef AMPD_ENGINE_BACKEND_BACKEND_H_
#define AMPD_ENGINE_BACKEND_BACKEND_H_

// A device as the engine sees it, in three parts:
//   - memory (DeviceMemory, engine/core): allocate, fill, copy, read scalars;
//   - device AMP (DeviceAmp, device_amp.h): unscale and check, the scale
//     update, clipping's norm and the optimizer updates, on lists of tensors;
//   - kernels, which are not methods at all: each is registered per device in
//     the kernel registry (kernel_registry.h, kernels/*.h), so a new op adds
//     its kernels without touching this interface.
// and what this class adds: the device's identity, health and counters.
// Kernels accumulate in fp32 (fp64 for fp64 inputs) whatever the storage
// type, and round once when they store.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/device_amp.h"
#include "engine/backend/kernel_registry.h"
#include "engine/core/device_memory.h"
#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::backend {

// One physical device behind a backend, as GetCapabilities describes it.
struct DeviceProperties {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability (CUDA)
  int64_t memory_bytes = 0;
  int multiprocessors = 0;
  bool bf16 = false;  // native bf16 matmul units
  bool f16 = false;
  bool fp8 = false;
  // The dense bf16 tensor-core rate on the data sheet (FLOP/s); 0 when this
  // GPU is not in the table (MFU is then not reported).
  double peak_bf16_flops = 0;
};

// A backend's device memory counters (zeros for the host).
struct DeviceMemoryStats {
  int64_t in_use_bytes = 0;
  int64_t peak_in_use_bytes = 0;
  int64_t cached_bytes = 0;
  int64_t device_allocations = 0;
};

class Backend : public core::DeviceMemory, public DeviceAmp {
 public:
  ~Backend() override = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // Whether this backend has every kernel `op` needs (forward and gradient)
  // in the kernel registry. A job whose model needs an op its device lacks is
  // refused when it is created (CheckKernels in engine/train), never run on
  // something else.
  virtual bool HasKernel(OpId op) const;

  // A failed device call makes the backend unusable for the job that hit it;
  // kernels cannot return errors through Tensor results, so they record the
  // first one here (with the call site) and the trainer checks after each step.
  virtual absl::Status Health() { return absl::OkStatus(); }
  // Why this backend cannot run jobs now (no device): checked by BackendFor.
  virtual absl::Status Ready() { return absl::OkStatus(); }
  // The devices it drives (empty for the CPU, which engine/cpu/capabilities
  // describes), and its memory counters: what the server reports, so that it
  // never calls a device library itself.
  virtual std::vector<DeviceProperties> Devices() { return {}; }
  virtual DeviceMemoryStats MemoryStats() { return {}; }
  // For the calling thread's following GEMMs: may f32 GEMMs use TF32?
  virtual void SetMatmulOptions(bool allow_tf32) {}
  // The rate model FLOPs utilisation (MFU) is measured against, in FLOP/s:
  // the CPU's bf16 GEMM rate, measured once (engine/cpu/peak_flops.h); a
  // GPU's data-sheet dense bf16 rate. 0: unknown (MFU is not reported).
  virtual double PeakFlops() { return 0; }

  // Hand-offs between the calling thread's stream and another device
  // library's (NCCL's communication stream), for work that overlaps:
  //  - MarkStream: a marker of the work queued on that stream so far (an
  //    opaque handle: a timed cudaEvent_t on CUDA, reused kStreamMarkers
  //    markers later);
  //  - WaitForMarker: that stream waits, on the device, for a marker the
  //    other library recorded on its own stream; the host does not wait.
  // Backends without streams (the CPU) have neither: UNIMPLEMENTED.
  static constexpr int kStreamMarkers = 256;
  virtual absl::StatusOr<void*> MarkStream() {
    return absl::UnimplementedError(name() + " has no streams to mark");
  }
  virtual absl::Status WaitForMarker(void* marker) {
    return absl::UnimplementedError(name() + " has no streams to wait on");
  }

 protected:
  core::DeviceMemory& amp_memory() final { return *this; }
};

// The registry: each backend registers itself when linked in (its target is
// alwayslink): engine/cpu for the CPU, engine/cuda for CUDA. Registering also
// makes the backend the device's DeviceMemory (engine/core). nullptr
// unregisters (tests).
void RegisterBackend(Device device, Backend* backend);
// The backend for `device`: FAILED_PRECONDITION when none is linked in or its
// Ready() says it cannot run jobs here.
absl::StatusOr<Backend*> BackendFor(Device device);
// The backend that holds `t` (tensors only exist on registered devices).
Backend& BackendOf(const Tensor& t);

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_BACKEND_H_
