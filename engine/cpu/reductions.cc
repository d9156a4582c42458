// The CPU backend: Reductions, deterministic whatever the thread count (fixed chunks, fixed order).

#include "engine/backend/kernels/reductions.h"

#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"

namespace ampd::engine::cpu {

using backend::KernelMethod;
using backend::SumAllKernel;
using backend::SumRowsKernel;

Tensor CpuBackendImpl::SumAll(const Tensor& x, DType out) {
  // Accumulate in double: a long f32 sum would otherwise drift with length.
  if (UsesDouble(x)) {
    const double* xv = x.data<double>();
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += xv[i];
    return Tensor::Full({}, out, s);
  }
  const double s = ChunkedSum(x.numel(), [&](int64_t begin, int64_t len, float* buf, double* acc) {
    Accumulate8<false>(LoadBlock(x, begin, len, buf), len, acc);
  });
  return Tensor::Full({}, out, s);
}

Tensor CpuBackendImpl::SumRows(const Tensor& x, DType out) {
  const int64_t cols = x.dim(-1), rows = Rows(x);
  std::vector<double> s(cols, 0.0);
  if (UsesDouble(x)) {
    const double* xv = x.data<double>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) s[c] += xv[r * cols + c];
    }
  } else {
    // Each column is summed over the rows in order, in double, by the one
    // thread that owns its slice of columns.
    ForColumnSlices(rows, cols, [&](int64_t c0, int64_t c1) {
      float row_buf[kColumnSlice];
      double* __restrict sp = s.data() + c0;
      for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict xr = LoadBlock(x, r * cols + c0, c1 - c0, row_buf);
        AMPD_SIMD
        for (int64_t c = 0; c < c1 - c0; ++c) sp[c] += xr[c];
      }
    });
  }
  return Tensor::FromDoubles(s, {cols}, out);
}

double CpuBackendImpl::SumOfSquares(const std::vector<Tensor>& tensors) {
  double s = 0;
  for (const Tensor& t : tensors) {
    if (UsesDouble(t)) {
      const double* v = t.data<double>();
      for (int64_t i = 0; i < t.numel(); ++i) s += v[i] * v[i];
      continue;
    }
    s += ChunkedSum(t.numel(), [&](int64_t begin, int64_t len, float* buf, double* acc) {
      Accumulate8<true>(LoadBlock(t, begin, len, buf), len, acc);
    });
  }
  return s;
}

AMPD_REGISTER_KERNEL(SumAllKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::SumAll>::Call);
AMPD_REGISTER_KERNEL(SumRowsKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::SumRows>::Call);

}  // namespace ampd::engine::cpu
