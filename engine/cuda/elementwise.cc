// The CUDA backend: casts, the unary and binary families, scaling, in-place
// accumulation and dropout.

#include "engine/backend/kernels/elementwise.h"

#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::AddInPlaceKernel;
using backend::BinaryKernel;
using backend::CastKernel;
using backend::DropoutKernel;
using backend::ScaleKernel;
using backend::UnaryBackwardKernel;
using backend::UnaryKernel;

Tensor CudaBackend::Cast(const Tensor& x, DType dtype) {
  Tensor y = Allocate(x.shape(), dtype, false);
  CopyInto(y, x);
  return y;
}

Tensor CudaBackend::Unary(OpId op, const Tensor& x) {
  Tensor y = Allocate(x.shape(), x.dtype(), false);
  if (Ok()) {
    Record(LaunchUnary(op, x.raw(), Dt(x), y.raw(), Dt(y), x.numel(), S()));
  }
  return y;
}

Tensor CudaBackend::UnaryBackward(OpId op, const Tensor& x, const Tensor& dy) {
  Tensor dx = Allocate(x.shape(), dy.dtype(), false);
  if (Ok()) {
    Record(LaunchUnaryBackward(op, x.raw(), Dt(x), dy.raw(), Dt(dy), dx.raw(), x.numel(), S()));
  }
  return dx;
}

Tensor CudaBackend::Binary(OpId op, const Tensor& a, const Tensor& b, DType out) {
  Tensor y = Allocate(a.shape(), out, false);
  if (Ok()) {
    Record(LaunchBinary(op, a.raw(), Dt(a), b.raw(), Dt(b), b.numel(), y.raw(), Dt(out), a.numel(),
                        S()));
  }
  return y;
}

Tensor CudaBackend::Scale(const Tensor& x, double factor, DType out) {
  Tensor y = Allocate(x.shape(), out, false);
  if (Ok()) Record(LaunchScale(x.raw(), Dt(x), factor, y.raw(), Dt(out), x.numel(), S()));
  return y;
}

void CudaBackend::AddInPlace(const Tensor& x, const Tensor& y, double alpha) {
  if (Ok()) Record(LaunchAddInPlace(x.raw(), Dt(x), y.raw(), Dt(y), alpha, x.numel(), S()));
}

Tensor CudaBackend::Dropout(const Tensor& x, double p, uint64_t seed) {
  Tensor y = Allocate(x.shape(), x.dtype(), false);
  if (Ok()) Record(LaunchDropout(x.raw(), Dt(x), p, seed, y.raw(), x.numel(), S()));
  return y;
}

AMPD_CUDA_KERNEL(CastKernel, Cast);
AMPD_CUDA_KERNEL(UnaryKernel, Unary);
AMPD_CUDA_KERNEL(UnaryBackwardKernel, UnaryBackward);
AMPD_CUDA_KERNEL(BinaryKernel, Binary);
AMPD_CUDA_KERNEL(ScaleKernel, Scale);
AMPD_CUDA_KERNEL(AddInPlaceKernel, AddInPlace);
AMPD_CUDA_KERNEL(DropoutKernel, Dropout);

}  // namespace ampd::engine::cuda
