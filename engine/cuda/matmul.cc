// The CUDA backend: GEMMs through cuBLASLt (gemm.h): matmul, and linear with the bias fused into
// the epilogue where cuBLASLt has one.

#include "engine/backend/kernels/matmul.h"

#include "engine/backend/kernels/elementwise.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/gemm.h"

namespace ampd::engine::cuda {

using backend::LinearByMatmul;
using backend::LinearKernel;
using backend::MatmulKernel;

Tensor CudaBackend::Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                           DType out) {
  return Gemm(a, b, trans_a, trans_b, out, Tensor());
}

Tensor CudaBackend::Linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
  // The bias epilogue wants the bias in the output's dtype and a native
  // output type for the inputs (f32 or the inputs' own); f64 GEMMs (a
  // checking mode, not a fast one) are not asked for epilogues.
  if (b.defined() && b.dtype() == out && x.rank() == 2 && x.dtype() != DType::kF64 &&
      NativeOutput(x.dtype(), out)) {
    return Gemm(x, w, false, true, out, b);
  }
  return LinearByMatmul(x, w, b, out);
}

bool CudaBackend::NativeOutput(DType in, DType out) {
  if (in == DType::kF64) return out == DType::kF64;
  return out == in || out == DType::kF32;
}

Tensor CudaBackend::Gemm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out,
                         const Tensor& bias) {
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  // cuBLASLt writes f32 or the inputs' type; anything else is converted after.
  const DType native = NativeOutput(a.dtype(), out) ? out : a.dtype();
  Tensor c = Allocate({m, n}, native, false);
  if (Ok()) {
    GemmArgs g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.a = a.raw();
    g.b = b.raw();
    g.c = c.raw();
    g.ab_dtype = Dt(a);
    g.c_dtype = Dt(native);
    g.allow_tf32 = Ctx().allow_tf32;
    GemmRunner& runner = GemmRunner::ForThisThread();
    if (bias.defined()) {
      g.epilogue = Epilogue::kBias;
      g.bias = bias.raw();
      // Where cuBLASLt has no algorithm with the bias epilogue (its support
      // depends on the GPU, types and shape), the bias is added after.
      if (!runner.HasAlgorithm(g)) {
        g.epilogue = Epilogue::kNone;
        g.bias = nullptr;
      }
    }
    Record(runner.Run(g, S()));
    if (bias.defined() && g.epilogue == Epilogue::kNone && Ok()) {
      Record(LaunchBinary(OpId::kAdd, c.raw(), Dt(c), bias.raw(), Dt(bias), n, c.raw(), Dt(c),
                          m * n, S()));
    }
  }
  return native == out ? c : Cast(c, out);
}

AMPD_CUDA_KERNEL(MatmulKernel, Matmul);
AMPD_CUDA_KERNEL(LinearKernel, Linear);

}  // namespace ampd::engine::cuda
