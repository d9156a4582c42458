#ifndef AMPD_ENGINE_BACKEND_KERNEL_REGISTRY_H_
#define AMPD_ENGINE_BACKEND_KERNEL_REGISTRY_H_

// Kernels registered per (kernel, device). Every kernel of the engine is
// reached through here: an op calls the kernel of its input's device, and a
// new op adds its kernels without touching the Backend interface, the other
// backends or the fake device.
//
// A kernel is declared once, in engine/backend/kernels/<family>.h, by its
// signature, its name and the ops that need it (forward or gradient):
//   struct DropoutKernel {
//     static constexpr const char* kName = "dropout";
//     static constexpr OpId kOps[] = {OpId::kDropout};
//     using Fn = Tensor (*)(const Tensor& x, double p, uint64_t seed);
//   };
// each backend's kernel file registers its function for its device, typed,
// so a wrong signature does not compile (engine/cpu/elementwise.cc):
//   AMPD_REGISTER_KERNEL(DropoutKernel, Device::kCpu, CpuDropout);
// and the op calls the kernel of its input's device:
//   Kernel<DropoutKernel>(x.device())(x, p, seed).
// An op has a kernel on a device when every kernel that lists it is
// registered there (HasKernel); a job whose op has none on its device is
// refused when it is created (CheckKernels in engine/train).

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::backend {

// Whether every kernel `op` needs is registered for `device` (false for an
// op no kernel lists: nothing could run it).
bool HasKernel(OpId op, Device device);
// The name of a kernel `op` needs that `device` lacks ("" when none).
const char* MissingKernelFor(OpId op, Device device);
// Aborts naming the kernel and device: a kernel was called that CheckKernels
// would have refused, which is a bug in the engine, not bad input.
[[noreturn]] void MissingKernel(const char* kernel, Device device);

template <typename K>
typename K::Fn& KernelSlot(Device device) {
  static std::array<typename K::Fn, kNumDevices> slots{};
  return slots[static_cast<int>(device)];
}

// For test devices whose memory is host memory (the fake device backend):
// every CPU kernel of the registry, run for `device` on host aliases of its
// tensors (to_host on each Tensor argument, to_device on each Tensor of the
// result), with on_call(kernel name) before each call.
struct HostMirror {
  Tensor (*to_host)(const Tensor&) = nullptr;
  Tensor (*to_device)(Tensor) = nullptr;
  void (*on_call)(const char* kernel) = nullptr;
};
void MirrorHostKernels(Device device, HostMirror mirror);

// Calls hooks.before(kernel name) and hooks.after(kernel name) around every
// call of every kernel registered for `device` (gpu_bench --profile: time per
// kernel). For one device per process, before its kernels run; for
// measurements, not for jobs.
// With `detail`, the name passed is the kernel's followed by its arguments'
// dtypes and shapes ("matmul bf16[1024,768] bf16[50257,768] 0 1 f32"), so
// that one kernel's calls are told apart by shape.
// With `active`, the hooks run only while *active is true (a kernel costs
// one more test and call otherwise).
struct KernelHooks {
  void (*before)(const char* kernel) = nullptr;
  void (*after)(const char* kernel) = nullptr;
  bool detail = false;
  const bool* active = nullptr;
};
void WrapKernels(Device device, KernelHooks hooks);

// A result made of several tensors (LayerNormResult, ...) declares
//   template <typename F> Result MapTensors(const Result& r, F f)
// beside it, applying f to each tensor, so that the mirror can move it.

namespace kernel_registry_internal {

HostMirror& Mirror();

template <typename T, typename = void>
struct HasMapTensors : std::false_type {};
template <typename T>
struct HasMapTensors<T, std::void_t<decltype(MapTensors(
                            std::declval<const T&>(), std::declval<Tensor (*)(const Tensor&)>()))>>
    : std::true_type {};

template <typename T>
decltype(auto) ToHost(T&& v) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, Tensor>) {
    return Mirror().to_host(v);
  } else if constexpr (HasMapTensors<U>::value) {
    return MapTensors(
        v, +[](const Tensor& t) { return Mirror().to_host(t); });
  } else {
    return std::forward<T>(v);
  }
}
template <typename T>
T ToDevice(T v) {
  if constexpr (std::is_same_v<T, Tensor>) {
    return Mirror().to_device(std::move(v));
  } else if constexpr (HasMapTensors<T>::value) {
    return MapTensors(
        v, +[](const Tensor& t) { return Mirror().to_device(t); });
  } else {
    return v;
  }
}

void RecordRequirement(OpId op, const char* kernel, bool (*registered)(Device));

template <typename K, typename Fn>
struct Mirrored;
template <typename K, typename R, typename... A>
struct Mirrored<K, R (*)(A...)> {
  static R Run(A... args) {
    if (Mirror().on_call != nullptr) Mirror().on_call(K::kName);
    if constexpr (std::is_void_v<R>) {
      KernelSlot<K>(Device::kCpu)(ToHost(static_cast<A>(args))...);
    } else {
      return ToDevice(KernelSlot<K>(Device::kCpu)(ToHost(static_cast<A>(args))...));
    }
  }
};

using Installer = void (*)(Device);
std::vector<Installer>& CpuKernelMirrors();
template <typename K>
void InstallMirror(Device device) {
  KernelSlot<K>(device) = &Mirrored<K, typename K::Fn>::Run;
}

KernelHooks& Hooks();
std::vector<Installer>& KernelWrappers();
template <typename K, typename Fn>
struct Wrapped;
template <typename T>
void DescribeArgument(std::string& out, const T& v) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, Tensor>) {
    out += ' ';
    if (!v.defined()) {
      out += '-';
      return;
    }
    out += DTypeName(v.dtype());
    out += core::ShapeString(v.shape());
  } else if constexpr (std::is_same_v<U, DType>) {
    out += ' ';
    out += DTypeName(v);
  } else if constexpr (std::is_arithmetic_v<U>) {
    out += ' ' + std::to_string(v);
  } else if constexpr (std::is_enum_v<U>) {
    out += ' ' + std::to_string(static_cast<int64_t>(v));
  }
}
template <typename K, typename R, typename... A>
struct Wrapped<K, R (*)(A...)> {
  static inline R (*original)(A...) = nullptr;
  static R Run(A... args) {
    if (Hooks().active != nullptr && !*Hooks().active) return original(static_cast<A>(args)...);
    std::string name = K::kName;
    if (Hooks().detail) (DescribeArgument(name, args), ...);
    Hooks().before(name.c_str());
    if constexpr (std::is_void_v<R>) {
      original(static_cast<A>(args)...);
      Hooks().after(name.c_str());
    } else {
      R r = original(static_cast<A>(args)...);
      Hooks().after(name.c_str());
      return r;
    }
  }
};
template <typename K>
void InstallWrapper(Device device) {
  using W = Wrapped<K, typename K::Fn>;
  typename K::Fn& slot = KernelSlot<K>(device);
  if (slot == nullptr || slot == &W::Run) return;
  W::original = slot;
  slot = &W::Run;
}

template <typename K>
bool Registered(Device device) {
  return KernelSlot<K>(device) != nullptr;
}

}  // namespace kernel_registry_internal

namespace kernel_registry_internal {
template <typename K, typename = void>
struct HasOps : std::false_type {};
template <typename K>
struct HasOps<K, std::void_t<decltype(K::kOps)>> : std::true_type {};
}  // namespace kernel_registry_internal

// Whether `device` has kernel K: for kernels no op lists (an optimizer's
// step), which the trainer checks by name (CheckKernels).
template <typename K>
bool KernelRegistered(Device device) {
  return kernel_registry_internal::Registered<K>(device);
}

template <typename K>
bool RegisterKernel(Device device, typename K::Fn fn) {
  KernelSlot<K>(device) = fn;
  if (device == Device::kCpu) {
    // The CPU has every kernel (it is the reference): its registrations say
    // which kernels each op needs. (An optimizer step's kernel has no kOps.)
    if constexpr (kernel_registry_internal::HasOps<K>::value) {
      for (OpId op : K::kOps) {
        kernel_registry_internal::RecordRequirement(op, K::kName,
                                                    &kernel_registry_internal::Registered<K>);
      }
    }
    kernel_registry_internal::CpuKernelMirrors().push_back(
        &kernel_registry_internal::InstallMirror<K>);
    kernel_registry_internal::KernelWrappers().push_back(
        &kernel_registry_internal::InstallWrapper<K>);
  }
  return true;
}

// Takes a kernel away from a device (tests).
template <typename K>
void UnregisterKernel(Device device) {
  KernelSlot<K>(device) = nullptr;
}

template <typename K>
typename K::Fn Kernel(Device device) {
  typename K::Fn fn = KernelSlot<K>(device);
  if (fn == nullptr) MissingKernel(K::kName, device);
  return fn;
}

// A backend whose kernels are member functions of one object (C::Instance())
// registers KernelMethod<&C::Method>::Call.
template <auto Method>
struct KernelMethod;
template <typename C, typename R, typename... A, R (C::*Method)(A...)>
struct KernelMethod<Method> {
  static R Call(A... args) { return (C::Instance().*Method)(static_cast<A>(args)...); }
};

#define AMPD_KERNEL_CONCAT_INNER(a, b) a##b
#define AMPD_KERNEL_CONCAT(a, b) AMPD_KERNEL_CONCAT_INNER(a, b)
// At namespace scope in a kernel file (its target is alwayslink).
#define AMPD_REGISTER_KERNEL(K, device, fn)                                       \
  [[maybe_unused]] static const bool AMPD_KERNEL_CONCAT(kRegistered_, __LINE__) = \
      ::ampd::engine::backend::RegisterKernel<K>(device, fn)

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNEL_REGISTRY_H_
