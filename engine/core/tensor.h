#ifndef AMPD_ENGINE_CORE_TENSOR_H_
#define AMPD_ENGINE_CORE_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace ampd::engine::autograd {
struct Node;  // a recorded op (engine/autograd), kept on its output
}  // namespace ampd::engine::autograd

namespace ampd::engine::core {

class Tensor;

enum class Device { kCpu, kCuda };
inline constexpr int kNumDevices = static_cast<int>(Device::kCuda) + 1;

// The shared state behind a Tensor handle. Contiguous row-major storage.
struct TensorImpl {
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  std::shared_ptr<uint8_t[]> data;  // shared by Detach()ed aliases
  int64_t numel = 0;

  // Autograd. A leaf with requires_grad accumulates into `grad`; a non-leaf
  // carries the node that produced it.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  std::string name;  // parameters are named ("fc1.weight"), for reports
};

// A reference-counted handle: copies alias the same storage (like torch.Tensor).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  static Tensor Empty(const std::vector<int64_t>& shape, DType dtype);  // zero-initialised
  // Like Empty, but the values are indeterminate: for kernels that overwrite
  // every element before the tensor is read.
  static Tensor Uninitialized(const std::vector<int64_t>& shape, DType dtype);
  static Tensor Zeros(const std::vector<int64_t>& shape, DType dtype);
  static Tensor Full(const std::vector<int64_t>& shape, DType dtype, double value);
  // Values are rounded to `dtype` (round-to-nearest-even).
  static Tensor FromVector(const std::vector<float>& values, const std::vector<int64_t>& shape,
                           DType dtype = DType::kF32);
  static Tensor FromDoubles(const std::vector<double>& values, const std::vector<int64_t>& shape,
                            DType dtype = DType::kF64);
  // On another device (through that device's backend; it must be available).
  static Tensor Zeros(const std::vector<int64_t>& shape, DType dtype, Device device);
  static Tensor Full(const std::vector<int64_t>& shape, DType dtype, double value, Device device);

  bool defined() const { return impl_ != nullptr; }
  const std::vector<int64_t>& shape() const { return impl_->shape; }
  int64_t dim(int i) const { return impl_->shape[i < 0 ? impl_->shape.size() + i : i]; }
  int rank() const { return static_cast<int>(impl_->shape.size()); }
  int64_t numel() const { return impl_->numel; }
  DType dtype() const { return impl_->dtype; }
  size_t nbytes() const { return impl_->numel * DTypeSize(impl_->dtype); }
  Device device() const { return impl_->device; }
  // A copy on `device` (this tensor itself when it is already there).
  Tensor To(Device device) const;

  // The storage: a host pointer for CPU tensors, a device pointer otherwise
  // (only that device's backend may dereference it).
  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(impl_->data.get());
  }
  void* raw() const { return impl_->data.get(); }

  // Element values widened to float / double (copies; device tensors are
  // read back, which waits for the device).
  std::vector<float> ToFloats() const;
  std::vector<double> ToDoubles() const;
  float Item() const;  // numel() == 1

  // A new tensor with the same values (no autograd history).
  Tensor Clone() const;
  // The same storage without autograd history. Backward closures keep outputs
  // this way, so a tensor never owns the node that owns it.
  Tensor Detach() const;
  // Rows [begin, end) of a tensor of rank >= 1, sharing its storage (a
  // detached view: no autograd through it). Writes through it show in this.
  Tensor Rows(int64_t begin, int64_t end) const;
  // An alias of the same storage with another shape of as many elements
  // (no autograd: ops::Reshape records one).
  Tensor Reshape(const std::vector<int64_t>& shape) const;
  // Overwrites this tensor's values from `src` (same numel), rounding to dtype.
  void CopyFrom(const Tensor& src) const;

  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& set_requires_grad(bool value) {
    impl_->requires_grad = value;
    return *this;
  }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& grad) const { impl_->grad = grad.impl_; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl_->grad_fn; }
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const std::string& name() const { return impl_->name; }
  Tensor& set_name(std::string name) {
    impl_->name = std::move(name);
    return *this;
  }

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& shared_impl() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace ampd::engine::core

// The engine's vocabulary: every layer (and the server) speaks of tensors,
// dtypes and devices, so they are also ampd::engine's names. Everything else
// is named by its folder (ops::Linear, backend::Kernel, train::Trainer).
namespace ampd::engine {
using core::Device;
using core::kNumDevices;
using core::Tensor;
using core::TensorImpl;

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_CORE_TENSOR_H_
