// The CUDA backend: GEMMs through cuBLASLt (gemm.h): matmul, linear with the bias fused into
// the epilogue where cuBLASLt has one, and GPT-2's MLP GEMMs with the GELU fused into theirs.

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

GemmArgs CudaBackend::GemmOf(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                             const Tensor& c) {
  GemmArgs g;
  g.m = c.dim(0);
  g.n = c.dim(1);
  g.k = trans_a ? a.dim(0) : a.dim(1);
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.a = a.raw();
  g.b = b.raw();
  g.c = c.raw();
  g.ab_dtype = Dt(a);
  g.c_dtype = Dt(c);
  g.allow_tf32 = Ctx().allow_tf32;
  return g;
}

Tensor CudaBackend::Gemm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out,
                         const Tensor& bias) {
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  // cuBLASLt writes f32 or the inputs' type; anything else is converted after.
  const DType native = NativeOutput(a.dtype(), out) ? out : a.dtype();
  Tensor c = Allocate({m, n}, native, false);
  if (Ok()) {
    GemmArgs g = GemmOf(a, b, trans_a, trans_b, c);
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

// The GELU epilogues take one dtype for the operands, the output, the kept
// pre-GELU values and the bias (f16, bf16 or f32: f64 GEMMs are a checking
// mode and get none), and a leading dimension of the kept values that is a
// multiple of 8. Anything else, or a problem cuBLASLt has no algorithm for,
// runs unfused.
namespace {
bool GeluEpilogueDType(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32;
}
}  // namespace

backend::LinearGeluTanhResult CudaBackend::LinearGeluTanh(const Tensor& x, const Tensor& w,
                                                          const Tensor& b, DType out) {
  if (b.defined() && x.rank() == 2 && w.rank() == 2 && GeluEpilogueDType(out) && x.dtype() == out &&
      w.dtype() == out && b.dtype() == out && w.dim(0) % 8 == 0) {
    Tensor y = Allocate({x.dim(0), w.dim(0)}, out, false);
    Tensor pre = Allocate({x.dim(0), w.dim(0)}, out, false);
    GemmArgs g = GemmOf(x, w, false, true, y);
    g.epilogue = Epilogue::kGeluAuxBias;
    g.bias = b.raw();
    g.aux = pre.raw();
    GemmRunner& runner = GemmRunner::ForThisThread();
    if (!Ok()) return {y, pre};
    if (runner.HasAlgorithm(g)) {
      Record(runner.Run(g, S()));
      return {y, pre};
    }
  }
  return backend::LinearGeluTanhUnfused(x, w, b, out);
}

backend::DGeluTanhResult CudaBackend::MatmulDGeluTanh(const Tensor& dy, const Tensor& w,
                                                      const Tensor& pre, bool bias_grad,
                                                      DType bias_dtype) {
  const DType d = pre.dtype();
  if (dy.rank() == 2 && w.rank() == 2 && GeluEpilogueDType(d) && dy.dtype() == d &&
      w.dtype() == d && (!bias_grad || bias_dtype == d) && w.dim(1) % 8 == 0) {
    Tensor dpre = Allocate({dy.dim(0), w.dim(1)}, d, false);
    Tensor dbias = bias_grad ? Allocate({w.dim(1)}, d, false) : Tensor();
    GemmArgs g = GemmOf(dy, w, false, false, dpre);
    g.epilogue = bias_grad ? Epilogue::kDGeluBgrad : Epilogue::kDGelu;
    g.aux = pre.raw();
    g.bias_grad = bias_grad ? dbias.raw() : nullptr;
    GemmRunner& runner = GemmRunner::ForThisThread();
    if (!Ok()) return {dpre, dbias};
    if (runner.HasAlgorithm(g)) {
      Record(runner.Run(g, S()));
      return {dpre, dbias};
    }
  }
  return backend::MatmulDGeluTanhUnfused(dy, w, pre, bias_grad, bias_dtype);
}

AMPD_CUDA_KERNEL(MatmulKernel, Matmul);
AMPD_CUDA_KERNEL(LinearKernel, Linear);
AMPD_CUDA_KERNEL(LinearGeluTanhKernel, LinearGeluTanh);
AMPD_CUDA_KERNEL(MatmulDGeluTanhKernel, MatmulDGeluTanh);

}  // namespace ampd::engine::cuda
