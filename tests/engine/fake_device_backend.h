#ifndef AMPD_TESTS_ENGINE_FAKE_DEVICE_BACKEND_H_
#define AMPD_TESTS_ENGINE_FAKE_DEVICE_BACKEND_H_

// A stand-in "CUDA" backend for machines without a GPU: tensors are tagged
// Device::kCuda but live in host memory, and every kernel is the CPU one. It
// runs the engine's device plumbing (Tensor::To, CopyInto, ReadScalars, the
// trainer's device step with device-side AMP, host copies for checkpoints)
// exactly as a real device backend would be driven, so that path is tested
// here even though the CUDA kernels themselves can only run on a GPU.
// Each call can be counted, to show which API the trainer used. Its kernels
// are the registry's CPU kernels, mirrored generically; what it implements
// itself is memory and device AMP.

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/kernel_registry.h"
#include "engine/cpu/cpu_backend.h"

namespace ampd::engine::testing {

class FakeDeviceBackend final : public backend::Backend {
 public:
  // Every kernel (kernel_registry.h) runs here as its CPU version on host
  // aliases, generically: nothing to add per op. Each call is counted under
  // the kernel's name (calls["embedding"]).
  FakeDeviceBackend() {
    Current() = this;
    backend::MirrorHostKernels(Device::kCuda, {&HostAlias, &DeviceTag, &CountCall});
  }
  ~FakeDeviceBackend() override {
    if (Current() == this) Current() = nullptr;
  }
  static Tensor HostAlias(const Tensor& t) { return H(t); }
  static Tensor DeviceTag(Tensor t) { return D(std::move(t)); }
  static void CountCall(const char* kernel) {
    if (Current() != nullptr) ++Current()->calls[kernel];
  }
  Device device() const override { return Device::kCuda; }
  std::string name() const override { return "fake-cuda"; }
  // Every op the CPU has (the mirror registers all its kernels), less those
  // a test takes away.
  bool HasKernel(OpId op) const override {
    return missing.count(op) == 0 && backend::Backend::HasKernel(op);
  }
  std::set<OpId> missing;
  // What Devices() reports (none by default: FP8 modes are then refused).
  std::vector<backend::DeviceProperties> devices;
  std::vector<backend::DeviceProperties> Devices() override { return devices; }

  // A host-tagged alias of a fake-device tensor: the CPU kernels may read it.
  static Tensor H(const Tensor& t) {
    if (!t.defined() || t.device() == Device::kCpu) return t;
    auto impl = std::make_shared<TensorImpl>();
    impl->shape = t.shape();
    impl->dtype = t.dtype();
    impl->numel = t.numel();
    impl->data = t.impl()->data;
    return Tensor(std::move(impl));
  }
  // Tags a fresh CPU result as living on the device.
  static Tensor D(Tensor t) {
    if (t.defined()) t.impl()->device = Device::kCuda;
    return t;
  }
  static std::vector<Tensor> H(const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const Tensor& t : ts) out.push_back(H(t));
    return out;
  }

  std::map<std::string, int> calls;
  // Host waits the trainer itself asked for (ReadScalars outside the
  // reference AMP implementations, which read freely: a real device does not).
  int trainer_reads = 0;
  int64_t uploaded_bytes = 0;  // host -> device through CopyInto
  int downloads = 0;           // device -> host through CopyInto (e.g. Item())

  Tensor Allocate(const std::vector<int64_t>& shape, DType dtype, bool zero) override {
    ++calls["Allocate"];
    return D(zero ? Tensor::Empty(shape, dtype) : Tensor::Uninitialized(shape, dtype));
  }
  void Fill(const Tensor& t, double value) override {
    ++calls["Fill"];
    H(t).CopyFrom(Tensor::Full(t.shape(), t.dtype(), value));
  }
  void CopyInto(const Tensor& dst, const Tensor& src) override {
    ++calls["CopyInto"];
    if (dst.device() != Device::kCpu && src.device() == Device::kCpu) {
      uploaded_bytes += src.nbytes();
    }
    // A copy to the host waits for the device, like ReadScalars.
    if (dst.device() == Device::kCpu && src.device() != Device::kCpu && inside_reference_ == 0) {
      ++downloads;
    }
    H(dst).CopyFrom(H(src));
  }
  std::vector<double> ReadScalars(const std::vector<Tensor>& scalars) override {
    ++calls["ReadScalars"];
    if (inside_reference_ == 0) ++trainer_reads;
    std::vector<double> out;
    for (const Tensor& t : scalars) out.push_back(H(t).ToDoubles().at(0));
    return out;
  }

  backend::NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads,
                                          float inv_scale) override {
    ++calls["UnscaleAndCheck"];
    return cpu().UnscaleAndCheck(H(grads), inv_scale);
  }
  double SumOfSquares(const std::vector<Tensor>& tensors) override {
    ++calls["SumOfSquares"];
    return cpu().SumOfSquares(H(tensors));
  }
  void SgdStep(const Tensor& p, const Tensor& g, const Tensor& m, const SgdHyper& h,
               bool first) override {
    ++calls["SgdStep"];
    cpu().SgdStep(H(p), H(g), H(m), h, first);
  }
  void AdamWStep(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                 const AdamWHyper& h) override {
    ++calls["AdamWStep"];
    cpu().AdamWStep(H(p), H(g), H(m), H(v), h);
  }
  void UnscaleAndCheckOnDevice(const std::vector<Tensor>& grads,
                               const backend::DeviceAmpState& amp) override {
    ++calls["UnscaleAndCheckOnDevice"];
    ++inside_reference_;
    backend::Backend::UnscaleAndCheckOnDevice(grads, amp);
    --inside_reference_;
  }
  void MultiplyAndCheckOnDevice(const std::vector<Tensor>& grads, float factor,
                                const Tensor& found_inf) override {
    ++calls["MultiplyAndCheckOnDevice"];
    ++inside_reference_;
    backend::Backend::MultiplyAndCheckOnDevice(grads, factor, found_inf);
    --inside_reference_;
  }
  void ClipOnDevice(const std::vector<Tensor>& grads, const Tensor& sum_sq, double max_norm,
                    const Tensor& found_inf) override {
    ++calls["ClipOnDevice"];
    ++inside_reference_;
    backend::Backend::ClipOnDevice(grads, sum_sq, max_norm, found_inf);
    --inside_reference_;
  }
  void UpdateScaleOnDevice(const backend::DeviceAmpState& amp,
                           const backend::ScaleUpdateOptions& o) override {
    ++calls["UpdateScaleOnDevice"];
    ++inside_reference_;
    backend::Backend::UpdateScaleOnDevice(amp, o);
    --inside_reference_;
  }
  void AdamWStepFused(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                      const AdamWHyper& h, const FusedStepArgs& args) override {
    ++calls["AdamWStepFused"];
    ++inside_reference_;
    backend::Backend::AdamWStepFused(p, g, m, v, h, args);
    --inside_reference_;
  }
  void AdamWStepFusedList(const std::vector<AdamWParam>& params, const AdamWHyper& h,
                          const Tensor& found_inf, const Tensor& step) override {
    ++calls["AdamWStepFusedList"];
    ++inside_reference_;
    backend::Backend::AdamWStepFusedList(params, h, found_inf, step);
    --inside_reference_;
  }

  void SumOfSquaresOnDevice(const std::vector<Tensor>& tensors, const Tensor& out) override {
    ++calls["SumOfSquaresOnDevice"];
    ++inside_reference_;
    backend::Backend::SumOfSquaresOnDevice(tensors, out);
    --inside_reference_;
  }
  void SgdStepFused(const Tensor& p, const Tensor& g, const Tensor& m, const SgdHyper& h,
                    bool first, const FusedStepArgs& args) override {
    ++calls["SgdStepFused"];
    ++inside_reference_;
    backend::Backend::SgdStepFused(p, g, m, h, first, args);
    --inside_reference_;
  }

 private:
  static FakeDeviceBackend*& Current() {
    static FakeDeviceBackend* current = nullptr;
    return current;
  }
  int inside_reference_ = 0;
  static backend::Backend& cpu() { return cpu::CpuBackend(); }
};

}  // namespace ampd::engine::testing

#endif  // AMPD_TESTS_ENGINE_FAKE_DEVICE_BACKEND_H_
