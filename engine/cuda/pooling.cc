// The CUDA backend: 2-D pooling and its gradient (kernels/pooling.cu).

#include "engine/backend/kernels/pooling.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::Pool2dBackwardKernel;
using backend::Pool2dGeometry;
using backend::Pool2dKernel;

Tensor CudaBackend::Pool2d(const Tensor& x, const Pool2dGeometry& g, DType out) {
  const std::vector<int64_t> ys = backend::Pool2dOutputShape(x.shape(), g);
  Tensor y = Allocate(ys, out, false);
  if (Ok()) {
    Record(LaunchPool2d(x.raw(), Dt(x), x.dim(0) * x.dim(1), x.dim(2), x.dim(3), g, ys[2], ys[3],
                        y.raw(), Dt(out), S()));
  }
  return y;
}

Tensor CudaBackend::Pool2dBackward(const Tensor& x, const Tensor& dy, const Pool2dGeometry& g) {
  Tensor dx = Allocate(x.shape(), x.dtype(), false);
  if (Ok()) {
    Record(LaunchPool2dBackward(x.raw(), Dt(x), dy.raw(), Dt(dy), x.dim(0) * x.dim(1), x.dim(2),
                                x.dim(3), g, dy.dim(2), dy.dim(3), dx.raw(), S()));
  }
  return dx;
}

AMPD_CUDA_KERNEL(Pool2dKernel, Pool2d);
AMPD_CUDA_KERNEL(Pool2dBackwardKernel, Pool2dBackward);

}  // namespace ampd::engine::cuda
