// The CUDA backend: conv2d and its gradients through cuDNN (conv.h); the
// bias and its gradient are our per-channel kernels.

#include "engine/backend/kernels/conv.h"

#include "engine/cuda/conv.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::Conv2dBackwardDataKernel;
using backend::Conv2dBackwardWeightKernel;
using backend::Conv2dGeometry;
using backend::Conv2dKernel;
using backend::Conv2dWeightGrads;

namespace {

ConvArgs Args(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const Conv2dGeometry& g,
              DType dtype) {
  ConvArgs a;
  for (int i = 0; i < 4; ++i) a.x[i] = x[i], a.w[i] = w[i];
  for (int d = 0; d < 2; ++d) {
    a.stride[d] = g.stride[d];
    a.padding[d] = g.padding[d];
    a.dilation[d] = g.dilation[d];
  }
  a.groups = g.groups;
  a.dtype = Dt(dtype);
  return a;
}

int64_t Inner(const std::vector<int64_t>& s) { return s[2] * s[3]; }

}  // namespace

// cuDNN computes in the operands' dtype (x and w share it); another output
// dtype is one conversion after.
Tensor CudaBackend::Conv2d(const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Conv2dGeometry& g, DType out) {
  const std::vector<int64_t> ys = backend::Conv2dOutputShape(x.shape(), w.shape(), g);
  Tensor y = Allocate(ys, x.dtype(), false);
  if (Ok()) {
    Record(ConvRunner::ForThisThread().Forward(Args(x.shape(), w.shape(), g, x.dtype()), x.raw(),
                                               w.raw(), y.raw(), S()));
  }
  if (bias.defined() && Ok()) {
    Record(
        LaunchAddChannelBias(y.raw(), Dt(y), bias.raw(), Dt(bias), ys[0], ys[1], Inner(ys), S()));
  }
  return out == y.dtype() ? y : Cast(y, out);
}

Tensor CudaBackend::Conv2dBackwardData(const Tensor& dy, const Tensor& w,
                                       const std::vector<int64_t>& x_shape, const Conv2dGeometry& g,
                                       DType out) {
  Tensor dyw = dy.dtype() == w.dtype() ? dy : Cast(dy, w.dtype());
  Tensor dx = Allocate(x_shape, w.dtype(), false);
  if (Ok()) {
    Record(ConvRunner::ForThisThread().BackwardData(Args(x_shape, w.shape(), g, w.dtype()),
                                                    dyw.raw(), w.raw(), dx.raw(), S()));
  }
  return out == dx.dtype() ? dx : Cast(dx, out);
}

Conv2dWeightGrads CudaBackend::Conv2dBackwardWeight(const Tensor& x, const Tensor& dy,
                                                    const std::vector<int64_t>& w_shape, bool bias,
                                                    const Conv2dGeometry& g, DType out) {
  Tensor dyx = dy.dtype() == x.dtype() ? dy : Cast(dy, x.dtype());
  Tensor dw = Allocate(w_shape, x.dtype(), false);
  if (Ok()) {
    Record(ConvRunner::ForThisThread().BackwardFilter(Args(x.shape(), w_shape, g, x.dtype()),
                                                      x.raw(), dyx.raw(), dw.raw(), S()));
  }
  Tensor db;
  if (bias) {
    db = Allocate({w_shape[0]}, out, false);
    if (Ok()) {
      Record(LaunchChannelSums(dyx.raw(), Dt(dyx), dyx.dim(0), dyx.dim(1), Inner(dyx.shape()),
                               db.raw(), Dt(out), S()));
    }
  }
  return {out == dw.dtype() ? dw : Cast(dw, out), db};
}

AMPD_CUDA_KERNEL(Conv2dKernel, Conv2d);
AMPD_CUDA_KERNEL(Conv2dBackwardDataKernel, Conv2dBackwardData);
AMPD_CUDA_KERNEL(Conv2dBackwardWeightKernel, Conv2dBackwardWeight);

}  // namespace ampd::engine::cuda
