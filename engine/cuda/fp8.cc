// The CUDA backend: FP8 casts, decodes and the scaling update
// (backend/kernels/fp8.h), over kernels/fp8.cu.

#include "engine/backend/kernels/fp8.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ampd::engine::cuda {

using backend::Fp8CastKernel;
using backend::Fp8DecodeKernel;
using backend::Fp8UpdateScalingKernel;

namespace {
int FormatCode(core::Fp8Format f) { return f == core::Fp8Format::kE4M3 ? 0 : 1; }
}  // namespace

Tensor CudaBackend::Fp8Cast(const Tensor& x, core::Fp8Format format, const Tensor& scales,
                            const Tensor& amax_history, int64_t index, const Tensor& saturated) {
  Tensor codes = Allocate(x.shape(), DType::kU8, false);
  if (Ok()) {
    Record(LaunchFp8Cast(x.raw(), Dt(x), x.numel(), FormatCode(format), scales.data<float>(), index,
                         amax_history.data<float>() + index,
                         saturated.defined() ? saturated.data<double>() + index : nullptr,
                         codes.data<uint8_t>(), Scratch(), S()));
  }
  return codes;
}

Tensor CudaBackend::Fp8Decode(const Tensor& codes, core::Fp8Format format, const Tensor& scale_invs,
                              int64_t index, DType dtype) {
  Tensor y = Allocate(codes.shape(), dtype, false);
  if (Ok()) {
    Record(LaunchFp8Decode(codes.data<uint8_t>(), codes.numel(), FormatCode(format),
                           scale_invs.data<float>(), index, y.raw(), Dt(dtype), S()));
  }
  return y;
}

void CudaBackend::Fp8UpdateScaling(const Tensor& amax_history, const Tensor& scales,
                                   const Tensor& scale_invs, const Tensor& scaled_max,
                                   core::AmaxAlgo algo) {
  if (!Ok()) return;
  Record(LaunchFp8UpdateScaling(amax_history.data<float>(), amax_history.shape()[0],
                                amax_history.shape()[1], scales.data<float>(),
                                scale_invs.data<float>(), scaled_max.data<float>(),
                                static_cast<int>(algo), S()));
}

AMPD_CUDA_KERNEL(Fp8CastKernel, Fp8Cast);
AMPD_CUDA_KERNEL(Fp8DecodeKernel, Fp8Decode);
AMPD_CUDA_KERNEL(Fp8UpdateScalingKernel, Fp8UpdateScaling);

}  // namespace ampd::engine::cuda
