#include "engine/core/tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_join.h"
#include "engine/core/device_memory.h"
#include "engine/core/half.h"

namespace ampd::engine::core {
namespace {

uint8_t ToU8(float v) {  // u8 storage: the nearest of 0..255
  return static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, std::nearbyint(v))));
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void StoreFloats(const float* src, const Tensor& dst) {
  const int64_t n = dst.numel();
  switch (dst.dtype()) {
    case DType::kF32:
      std::memcpy(dst.raw(), src, n * sizeof(float));
      break;
    case DType::kF16:
      ConvertF32ToF16(src, dst.data<uint16_t>(), n);
      break;
    case DType::kBF16:
      ConvertF32ToBF16(src, dst.data<uint16_t>(), n);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) dst.data<double>()[i] = src[i];
      break;
    case DType::kU8:
      for (int64_t i = 0; i < n; ++i) dst.data<uint8_t>()[i] = ToU8(src[i]);
      break;
  }
}

void StoreFloatRange(const float* src, const Tensor& dst, int64_t begin, int64_t len) {
  switch (dst.dtype()) {
    case DType::kF32:
      std::memcpy(dst.data<float>() + begin, src, len * sizeof(float));
      break;
    case DType::kF16:
      ConvertF32ToF16(src, dst.data<uint16_t>() + begin, len);
      break;
    case DType::kBF16:
      ConvertF32ToBF16(src, dst.data<uint16_t>() + begin, len);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < len; ++i) dst.data<double>()[begin + i] = src[i];
      break;
    case DType::kU8:
      for (int64_t i = 0; i < len; ++i) dst.data<uint8_t>()[begin + i] = ToU8(src[i]);
      break;
  }
}

constexpr int64_t kConvertBlock = 2048;

// Calls fn(begin, len, floats) for consecutive blocks of src widened (or, for
// f64, narrowed) to f32.
template <typename F>
void LoadFloatsTo(const Tensor& src, F&& fn) {
  float buf[kConvertBlock];
  for (int64_t begin = 0; begin < src.numel(); begin += kConvertBlock) {
    const int64_t len = std::min(kConvertBlock, src.numel() - begin);
    switch (src.dtype()) {
      case DType::kF32:
        std::memcpy(buf, src.data<float>() + begin, len * sizeof(float));
        break;
      case DType::kF16:
        ConvertF16ToF32(src.data<uint16_t>() + begin, buf, len);
        break;
      case DType::kBF16:
        ConvertBF16ToF32(src.data<uint16_t>() + begin, buf, len);
        break;
      case DType::kF64:
        for (int64_t i = 0; i < len; ++i)
          buf[i] = static_cast<float>(src.data<double>()[begin + i]);
        break;
      case DType::kU8:
        for (int64_t i = 0; i < len; ++i) buf[i] = src.data<uint8_t>()[begin + i];
        break;
    }
    fn(begin, len, static_cast<const float*>(buf));
  }
}

// Fills dst block by block: fn(begin, len, out) writes len floats, which are
// then rounded to dst's dtype.
template <typename F>
void StoreFloatsFrom(const Tensor& dst, F&& fn) {
  float buf[kConvertBlock];
  for (int64_t begin = 0; begin < dst.numel(); begin += kConvertBlock) {
    const int64_t len = std::min(kConvertBlock, dst.numel() - begin);
    fn(begin, len, buf);
    StoreFloatRange(buf, dst, begin, len);
  }
}

// Storage is 64-byte aligned (whole cache lines, as oneDNN prefers).
constexpr size_t kAlignment = 64;

struct AlignedDelete {
  void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(kAlignment)); }
};

Tensor Allocate(const std::vector<int64_t>& shape, DType dtype, bool zero) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->numel = Numel(shape);
  const size_t bytes = std::max<int64_t>(1, impl->numel) * DTypeSize(dtype);
  uint8_t* p = new (std::align_val_t(kAlignment)) uint8_t[bytes];
  impl->data = std::shared_ptr<uint8_t[]>(p, AlignedDelete());
  if (zero) std::memset(p, 0, bytes);
  return Tensor(std::move(impl));
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

Tensor Tensor::Empty(const std::vector<int64_t>& shape, DType dtype) {
  // Zero-initialised: cheap next to compute and keeps runs deterministic.
  return Allocate(shape, dtype, /*zero=*/true);
}

Tensor Tensor::Uninitialized(const std::vector<int64_t>& shape, DType dtype) {
  return Allocate(shape, dtype, /*zero=*/false);
}

Tensor Tensor::Zeros(const std::vector<int64_t>& shape, DType dtype) { return Empty(shape, dtype); }

Tensor Tensor::Full(const std::vector<int64_t>& shape, DType dtype, double value) {
  Tensor t = Uninitialized(shape, dtype);
  const int64_t n = t.numel();
  switch (dtype) {
    case DType::kF64:
      std::fill_n(t.data<double>(), n, value);
      break;
    case DType::kF32:
      std::fill_n(t.data<float>(), n, static_cast<float>(value));
      break;
    case DType::kF16:
      std::fill_n(t.data<uint16_t>(), n, F32ToF16Bits(static_cast<float>(value)));
      break;
    case DType::kBF16:
      std::fill_n(t.data<uint16_t>(), n, F32ToBF16Bits(static_cast<float>(value)));
      break;
    case DType::kU8:
      std::fill_n(t.data<uint8_t>(), n, ToU8(static_cast<float>(value)));
      break;
  }
  return t;
}

Tensor Tensor::FromVector(const std::vector<float>& values, const std::vector<int64_t>& shape,
                          DType dtype) {
  Tensor t = Uninitialized(shape, dtype);
  StoreFloats(values.data(), t);
  return t;
}

Tensor Tensor::FromDoubles(const std::vector<double>& values, const std::vector<int64_t>& shape,
                           DType dtype) {
  Tensor t = Uninitialized(shape, dtype);
  if (dtype == DType::kF64) {
    std::memcpy(t.raw(), values.data(), t.numel() * sizeof(double));
  } else {
    StoreFloatsFrom(t, [&](int64_t begin, int64_t len, float* out) {
      for (int64_t i = 0; i < len; ++i) out[i] = static_cast<float>(values[begin + i]);
    });
  }
  return t;
}

namespace {

// A host copy of a device tensor (same dtype).
Tensor HostCopy(const Tensor& t) {
  Tensor host = Tensor::Uninitialized(t.shape(), t.dtype());
  DeviceMemoryFor(t.device()).CopyInto(host, t);
  return host;
}

}  // namespace

Tensor Tensor::Zeros(const std::vector<int64_t>& shape, DType dtype, Device device) {
  if (device == Device::kCpu) return Zeros(shape, dtype);
  return DeviceMemoryFor(device).Allocate(shape, dtype, /*zero=*/true);
}

Tensor Tensor::Full(const std::vector<int64_t>& shape, DType dtype, double value, Device device) {
  if (device == Device::kCpu) return Full(shape, dtype, value);
  DeviceMemory& be = DeviceMemoryFor(device);
  Tensor t = be.Allocate(shape, dtype, /*zero=*/false);
  be.Fill(t, value);
  return t;
}

Tensor Tensor::To(Device device) const {
  if (device == this->device()) return *this;
  if (device == Device::kCpu) return HostCopy(*this);
  DeviceMemory& be = DeviceMemoryFor(device);
  Tensor t = be.Allocate(shape(), dtype(), /*zero=*/false);
  be.CopyInto(t, *this);
  return t;
}

std::vector<float> Tensor::ToFloats() const {
  if (device() != Device::kCpu) return HostCopy(*this).ToFloats();
  std::vector<float> out(numel());
  switch (dtype()) {
    case DType::kF32:
      std::memcpy(out.data(), raw(), numel() * sizeof(float));
      break;
    case DType::kF16:
      ConvertF16ToF32(data<uint16_t>(), out.data(), numel());
      break;
    case DType::kBF16:
      ConvertBF16ToF32(data<uint16_t>(), out.data(), numel());
      break;
    case DType::kF64:
      for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<float>(data<double>()[i]);
      break;
    case DType::kU8:
      for (int64_t i = 0; i < numel(); ++i) out[i] = data<uint8_t>()[i];
      break;
  }
  return out;
}

std::vector<double> Tensor::ToDoubles() const {
  if (device() != Device::kCpu) return HostCopy(*this).ToDoubles();
  switch (dtype()) {
    case DType::kF64:
      return std::vector<double>(data<double>(), data<double>() + numel());
    case DType::kF32:
      return std::vector<double>(data<float>(), data<float>() + numel());
    case DType::kF16:
    case DType::kBF16:
    case DType::kU8:
      break;
  }
  std::vector<double> out(numel());
  LoadFloatsTo(*this, [&](int64_t begin, int64_t len, const float* in) {
    for (int64_t i = 0; i < len; ++i) out[begin + i] = in[i];
  });
  return out;
}

float Tensor::Item() const { return ToFloats().at(0); }

Tensor Tensor::Detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape();
  impl->dtype = dtype();
  impl->device = impl_->device;
  impl->numel = numel();
  impl->data = impl_->data;
  return Tensor(std::move(impl));
}

Tensor Tensor::Reshape(const std::vector<int64_t>& shape) const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != numel()) {
    std::fprintf(stderr, "ampd: Reshape %s to %s changes the element count\n",
                 ShapeString(this->shape()).c_str(), ShapeString(shape).c_str());
    std::abort();
  }
  Tensor t = Detach();
  t.impl_->shape = shape;
  return t;
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  const int64_t row_elems = impl_->shape.empty() || impl_->shape[0] == 0 ? 0 : numel() / dim(0);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape();
  impl->shape[0] = end - begin;
  impl->dtype = dtype();
  impl->device = impl_->device;
  impl->numel = (end - begin) * row_elems;
  // An aliasing pointer: keeps the whole storage alive, points at row `begin`.
  impl->data = std::shared_ptr<uint8_t[]>(
      impl_->data,
      impl_->data.get() + begin * row_elems * static_cast<int64_t>(DTypeSize(dtype())));
  return Tensor(std::move(impl));
}

Tensor Tensor::Clone() const {
  if (device() != Device::kCpu) {
    DeviceMemory& be = DeviceMemoryFor(device());
    Tensor t = be.Allocate(shape(), dtype(), /*zero=*/false);
    be.CopyInto(t, *this);
    return t;
  }
  Tensor t = Uninitialized(shape(), dtype());
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

// The values are those of the former src.ToDoubles() / src.ToFloats() stored
// to this dtype, converted directly or through a small buffer, never through a
// full-size copy.
void Tensor::CopyFrom(const Tensor& src) const {
  if (device() != Device::kCpu || src.device() != Device::kCpu) {
    DeviceMemoryFor(device() != Device::kCpu ? device() : src.device()).CopyInto(*this, src);
    return;
  }
  if (src.dtype() == dtype()) {
    std::memcpy(raw(), src.raw(), nbytes());
  } else if (dtype() == DType::kF64) {
    double* out = data<double>();
    if (src.dtype() == DType::kF32) {
      const float* in = src.data<float>();
      for (int64_t i = 0; i < numel(); ++i) out[i] = in[i];
    } else {
      LoadFloatsTo(src, [&](int64_t begin, int64_t len, const float* in) {
        for (int64_t i = 0; i < len; ++i) out[begin + i] = in[i];
      });
    }
  } else if (src.dtype() == DType::kF32) {
    StoreFloats(src.data<float>(), *this);
  } else if (dtype() == DType::kF32) {
    switch (src.dtype()) {
      case DType::kF16:
        ConvertF16ToF32(src.data<uint16_t>(), data<float>(), numel());
        break;
      case DType::kBF16:
        ConvertBF16ToF32(src.data<uint16_t>(), data<float>(), numel());
        break;
      case DType::kF64:
        for (int64_t i = 0; i < numel(); ++i) {
          data<float>()[i] = static_cast<float>(src.data<double>()[i]);
        }
        break;
      case DType::kU8:
        for (int64_t i = 0; i < numel(); ++i) data<float>()[i] = src.data<uint8_t>()[i];
        break;
      case DType::kF32:
        break;
    }
  } else {
    // f16 <-> bf16, f64 -> f16 / bf16: through f32, a block at a time.
    LoadFloatsTo(src, [&](int64_t begin, int64_t len, const float* in) {
      StoreFloatRange(in, *this, begin, len);
    });
  }
}

}  // namespace ampd::engine::core
