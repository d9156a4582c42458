#include "engine/tensor.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_join.h"
#include "engine/half.h"

namespace ampd::engine {
namespace {

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
  }
}

}  // namespace

std::string ShapeString(const std::vector<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

Tensor Tensor::Empty(const std::vector<int64_t>& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->numel = Numel(shape);
  // Zero-initialised: cheap next to compute and keeps runs deterministic.
  impl->data.reset(new uint8_t[std::max<int64_t>(1, impl->numel) * DTypeSize(dtype)]());
  return Tensor(std::move(impl));
}

Tensor Tensor::Zeros(const std::vector<int64_t>& shape, DType dtype) { return Empty(shape, dtype); }

Tensor Tensor::Full(const std::vector<int64_t>& shape, DType dtype, double value) {
  Tensor t = Empty(shape, dtype);
  if (dtype == DType::kF64) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = value;
  } else {
    std::vector<float> v(t.numel(), static_cast<float>(value));
    StoreFloats(v.data(), t);
  }
  return t;
}

Tensor Tensor::FromVector(const std::vector<float>& values, const std::vector<int64_t>& shape,
                          DType dtype) {
  Tensor t = Empty(shape, dtype);
  StoreFloats(values.data(), t);
  return t;
}

Tensor Tensor::FromDoubles(const std::vector<double>& values, const std::vector<int64_t>& shape,
                           DType dtype) {
  Tensor t = Empty(shape, dtype);
  if (dtype == DType::kF64) {
    std::memcpy(t.raw(), values.data(), values.size() * sizeof(double));
  } else {
    std::vector<float> v(values.begin(), values.end());
    StoreFloats(v.data(), t);
  }
  return t;
}

std::vector<float> Tensor::ToFloats() const {
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
  }
  return out;
}

std::vector<double> Tensor::ToDoubles() const {
  if (dtype() == DType::kF64) {
    return std::vector<double>(data<double>(), data<double>() + numel());
  }
  std::vector<float> f = ToFloats();
  return std::vector<double>(f.begin(), f.end());
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

Tensor Tensor::Clone() const {
  Tensor t = Empty(shape(), dtype());
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

void Tensor::CopyFrom(const Tensor& src) const {
  if (src.dtype() == dtype()) {
    std::memcpy(raw(), src.raw(), nbytes());
  } else if (dtype() == DType::kF64) {
    std::vector<double> v = src.ToDoubles();
    std::memcpy(raw(), v.data(), nbytes());
  } else {
    std::vector<float> v = src.ToFloats();
    StoreFloats(v.data(), *this);
  }
}

}  // namespace ampd::engine
