#include "engine/core/device_memory.h"

#include <array>
#include <cstdio>
#include <cstdlib>

namespace ampd::engine::core {
namespace {

std::array<DeviceMemory*, kNumDevices>& Registered() {
  static std::array<DeviceMemory*, kNumDevices> registered{};
  return registered;
}

}  // namespace

Tensor DeviceMemory::Allocate(const std::vector<int64_t>& shape, DType dtype, bool zero) {
  return zero ? Tensor::Empty(shape, dtype) : Tensor::Uninitialized(shape, dtype);
}

void DeviceMemory::Fill(const Tensor& t, double value) {
  t.CopyFrom(Tensor::Full(t.shape(), t.dtype(), value));
}

void DeviceMemory::CopyInto(const Tensor& dst, const Tensor& src) { dst.CopyFrom(src); }

std::vector<double> DeviceMemory::ReadScalars(const std::vector<Tensor>& scalars) {
  std::vector<double> out;
  for (const Tensor& t : scalars) out.push_back(t.ToDoubles().at(0));
  return out;
}

void RegisterDeviceMemory(Device device, DeviceMemory* memory) {
  Registered()[static_cast<int>(device)] = memory;
}

DeviceMemory& DeviceMemoryFor(Device device) {
  DeviceMemory* m = Registered()[static_cast<int>(device)];
  if (m == nullptr) {
    std::fprintf(stderr, "ampd: a tensor on device %d, whose backend is not registered\n",
                 static_cast<int>(device));
    std::abort();
  }
  return *m;
}

}  // namespace ampd::engine::core
