#ifndef AMPD_ENGINE_BACKEND_KERNEL_REGISTRY_H_
#define AMPD_ENGINE_BACKEND_KERNEL_REGISTRY_H_

// Kernels registered per (op, device), for ops that are not Backend methods:
// a new op adds its kernels here without touching the Backend interface, the
// other backends or the fake device.
//
// An op declares its kernel's signature once, next to its forward
// (engine/ops/dropout.h):
//   struct DropoutKernel {
//     static constexpr OpId kOp = OpId::kDropout;
//     using Fn = Tensor (*)(const Tensor& x, double p, uint64_t seed);
//   };
// each backend's kernel file registers its function for its device, typed,
// so a wrong signature does not compile (engine/cpu/elementwise.cc):
//   AMPD_REGISTER_KERNEL(DropoutKernel, Device::kCpu, CpuDropout);
// and the op calls the kernel of its input's device:
//   Kernel<DropoutKernel>(x.device())(x, p, seed).
// Backend::HasKernel answers from here too, so a job whose op has no kernel
// on its device is refused when it is created (CheckKernels).

#include <array>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine {

// Whether some kernel file registered `op` for `device`; and whether `op` is
// one of the registry's at all (registered for some device: the CPU, its
// reference, at least). Ops that are not are Backend methods, which every
// backend implements.
bool KernelRegistered(OpId op, Device device);
bool IsRegistryOp(OpId op);
void MarkKernelRegistered(OpId op, Device device);
// Aborts naming the op and device: a kernel was called that CheckKernels
// would have refused, which is a bug in the engine, not bad input.
[[noreturn]] void MissingKernel(OpId op, Device device);

template <typename K>
typename K::Fn& KernelSlot(Device device) {
  static std::array<typename K::Fn, kNumDevices> slots{};
  return slots[static_cast<int>(device)];
}

// For test devices whose memory is host memory (the fake device backend):
// every CPU kernel of the registry, run for `device` on host aliases of its
// tensors (to_host on each Tensor argument, to_device on the result).
struct HostMirror {
  Tensor (*to_host)(const Tensor&) = nullptr;
  Tensor (*to_device)(Tensor) = nullptr;
};
void MirrorHostKernels(Device device, HostMirror mirror);

namespace kernel_registry_internal {

HostMirror& Mirror();
template <typename T>
T ToHost(T v) {
  return v;
}
inline Tensor ToHost(const Tensor& t) { return Mirror().to_host(t); }
template <typename T>
T ToDevice(T v) {
  return v;
}
inline Tensor ToDevice(Tensor t) { return Mirror().to_device(std::move(t)); }

template <typename K, typename Fn>
struct Mirrored;
template <typename K, typename R, typename... A>
struct Mirrored<K, R (*)(A...)> {
  static R Run(A... args) {
    if constexpr (std::is_void_v<R>) {
      KernelSlot<K>(Device::kCpu)(ToHost(args)...);
    } else {
      return ToDevice(KernelSlot<K>(Device::kCpu)(ToHost(args)...));
    }
  }
};

using Installer = void (*)(Device);
std::vector<Installer>& CpuKernelMirrors();
template <typename K>
void InstallMirror(Device device) {
  KernelSlot<K>(device) = &Mirrored<K, typename K::Fn>::Run;
  MarkKernelRegistered(K::kOp, device);
}

}  // namespace kernel_registry_internal

template <typename K>
bool RegisterKernel(Device device, typename K::Fn fn) {
  KernelSlot<K>(device) = fn;
  MarkKernelRegistered(K::kOp, device);
  if (device == Device::kCpu) {
    kernel_registry_internal::CpuKernelMirrors().push_back(
        &kernel_registry_internal::InstallMirror<K>);
  }
  return true;
}

template <typename K>
typename K::Fn Kernel(Device device) {
  typename K::Fn fn = KernelSlot<K>(device);
  if (fn == nullptr) MissingKernel(K::kOp, device);
  return fn;
}

#define AMPD_KERNEL_CONCAT_INNER(a, b) a##b
#define AMPD_KERNEL_CONCAT(a, b) AMPD_KERNEL_CONCAT_INNER(a, b)
// At namespace scope in a kernel file (its target is alwayslink).
#define AMPD_REGISTER_KERNEL(K, device, fn)                                       \
  [[maybe_unused]] static const bool AMPD_KERNEL_CONCAT(kRegistered_, __LINE__) = \
      ::ampd::engine::RegisterKernel<K>(device, fn)

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_BACKEND_KERNEL_REGISTRY_H_
