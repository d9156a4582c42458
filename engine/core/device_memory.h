#ifndef AMPD_ENGINE_CORE_DEVICE_MEMORY_H_
#define AMPD_ENGINE_CORE_DEVICE_MEMORY_H_

// Memory on a device: what Tensor needs to create, copy and read device
// tensors. Defined here, below the backends, so that core never depends on
// them: every engine::backend::Backend is a DeviceMemory and the backend registry
// (engine/backend/registry.cc) registers it here too. The defaults are the
// host's (plain CPU tensors).

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine::core {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A tensor on this device; zero-filled when `zero`.
  virtual Tensor Allocate(const std::vector<int64_t>& shape, DType dtype, bool zero);
  virtual void Fill(const Tensor& t, double value);
  // dst := src rounded to dst's dtype; either may be a host tensor.
  virtual void CopyInto(const Tensor& dst, const Tensor& src);
  // The values of several small tensors (numel 1 each) with one wait.
  virtual std::vector<double> ReadScalars(const std::vector<Tensor>& scalars);
};

void RegisterDeviceMemory(Device device, DeviceMemory* memory);
// The memory of `device`. Tensors exist only on devices whose backend was
// registered (and found ready) first, so a missing one is a programming error
// and aborts.
DeviceMemory& DeviceMemoryFor(Device device);

}  // namespace ampd::engine::core

#endif  // AMPD_ENGINE_CORE_DEVICE_MEMORY_H_
