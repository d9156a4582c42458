// The CUDA backend: FP8 casts, decodes and the scaling update
// (backend/kernels/fp8.h), over kernels/fp8.cu.

#include "engine/backend/kernels/fp8.h"

#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/gemm.h"

namespace ampd::engine::cuda {

using backend::Fp8CastKernel;
using backend::Fp8CastTransposeKernel;
using backend::Fp8CastTransposeResult;
using backend::Fp8DecodeKernel;
using backend::Fp8MatmulKernel;
using backend::Fp8UpdateScalingKernel;

namespace {
int FormatCode(core::Fp8Format f) { return f == core::Fp8Format::kE4M3 ? 0 : 1; }
int GemmCode(core::Fp8Format f) { return f == core::Fp8Format::kE4M3 ? kGemmE4M3 : kGemmE5M2; }

// FP8 tensor cores: compute capability 8.9 and up (device 0's, where jobs run).
bool Fp8TensorCores() {
  static const bool yes = [] {
    const std::vector<CudaDeviceInfo> d = ListCudaDevices(nullptr);
    return !d.empty() && d[0].fp8;
  }();
  return yes;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
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

// cuBLASLt's FP8 GEMM where it applies: FP8 tensor cores, k and n multiples
// of 16 (its leading dimensions), 16-byte aligned codes, not both operands
// E5M2, and an algorithm for the problem; the scales applied by cuBLASLt,
// rounded once to `out` (through f32 and the bias add when there is a bias). Anything else takes
// the CPU's way: decode to f32 and the f32 GEMM.
Tensor CudaBackend::Fp8Matmul(const Tensor& a, core::Fp8Format a_format, const Tensor& b,
                              core::Fp8Format b_format, const Tensor& scale_invs, int64_t a_index,
                              int64_t b_index, const Tensor& bias, DType out) {
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(0);
  const bool both_e5m2 = a_format == core::Fp8Format::kE5M2 && b_format == core::Fp8Format::kE5M2;
  if (Fp8TensorCores() && m > 0 && k % 16 == 0 && n % 16 == 0 && !both_e5m2 && Aligned16(a.raw()) &&
      Aligned16(b.raw())) {
    GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.trans_a = false;  // "TN": both K-contiguous
    g.trans_b = true;
    g.a = a.raw();
    g.b = b.raw();
    g.ab_dtype = GemmCode(a_format);
    g.b_dtype = GemmCode(b_format);
    // Without a bias the GEMM rounds once straight into `out`; with one, the
    // bias is added to the f32 result first (one rounding, as the CPU's).
    const DType c_type = bias.defined() ? DType::kF32 : out;
    g.c_dtype = Dt(c_type);
    g.a_scale = scale_invs.data<float>() + a_index;
    g.b_scale = scale_invs.data<float>() + b_index;
    GemmRunner& runner = GemmRunner::ForThisThread();
    if ((c_type == DType::kF32 || c_type == DType::kBF16 || c_type == DType::kF16) &&
        runner.HasAlgorithm(g)) {
      Tensor c = Allocate({m, n}, c_type, false);
      g.c = c.raw();
      if (Ok()) Record(runner.Run(g, S()));
      if (bias.defined() && Ok()) {
        Record(LaunchBinary(OpId::kAdd, c.raw(), Dt(c), bias.raw(), Dt(bias), n, c.raw(), Dt(c),
                            m * n, S()));
      }
      return c_type == out ? c : Cast(c, out);
    }
  }
  return Linear(Fp8Decode(a, a_format, scale_invs, a_index, DType::kF32),
                Fp8Decode(b, b_format, scale_invs, b_index, DType::kF32), bias, out);
}

Fp8CastTransposeResult CudaBackend::Fp8CastTranspose(const Tensor& x, core::Fp8Format format,
                                                     const Tensor& scales,
                                                     const Tensor& amax_history, int64_t index,
                                                     const Tensor& saturated) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  Fp8CastTransposeResult r{Allocate({rows, cols}, DType::kU8, false),
                           Allocate({cols, rows}, DType::kU8, false)};
  if (Ok()) {
    Record(LaunchFp8CastTranspose(x.raw(), Dt(x), rows, cols, FormatCode(format),
                                  scales.data<float>(), index, amax_history.data<float>() + index,
                                  saturated.defined() ? saturated.data<double>() + index : nullptr,
                                  r.codes.data<uint8_t>(), r.transposed.data<uint8_t>(), Scratch(),
                                  S()));
  }
  return r;
}

AMPD_CUDA_KERNEL(Fp8CastKernel, Fp8Cast);
AMPD_CUDA_KERNEL(Fp8MatmulKernel, Fp8Matmul);
AMPD_CUDA_KERNEL(Fp8CastTransposeKernel, Fp8CastTranspose);
AMPD_CUDA_KERNEL(Fp8DecodeKernel, Fp8Decode);
AMPD_CUDA_KERNEL(Fp8UpdateScalingKernel, Fp8UpdateScaling);

}  // namespace ampd::engine::cuda
