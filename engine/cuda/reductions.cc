// The CUDA backend: the sum of all elements and the sum over rows.

#include "engine/backend/kernels/reductions.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::SumAllKernel;
using backend::SumRowsKernel;

Tensor CudaBackend::SumAll(const Tensor& x, DType out) {
  Tensor y = Allocate({}, out, false);
  if (Ok()) Record(LaunchSumAll(x.raw(), Dt(x), x.numel(), Scratch(), y.raw(), Dt(out), S()));
  return y;
}

Tensor CudaBackend::SumRows(const Tensor& x, DType out) {
  const int64_t cols = x.dim(-1), rows = x.numel() / cols;
  Tensor y = Allocate({cols}, out, false);
  Tensor scratch = Allocate({ColumnSumScratch(rows, cols)}, DType::kF64, false);
  if (Ok()) {
    Record(LaunchSumRows(x.raw(), Dt(x), rows, cols, static_cast<double*>(scratch.raw()), y.raw(),
                         Dt(out), S()));
  }
  return y;
}

AMPD_CUDA_KERNEL(SumAllKernel, SumAll);
AMPD_CUDA_KERNEL(SumRowsKernel, SumRows);

}  // namespace ampd::engine::cuda
