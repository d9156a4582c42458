#ifndef AMPD_ENGINE_BACKEND_KERNELS_GELU_MLP_H_
#define AMPD_ENGINE_BACKEND_KERNELS_GELU_MLP_H_

// GPT-2's MLP (linear, GELU in its tanh form, linear) has two GEMMs that
// cuBLASLt can fuse the GELU into (kernel_registry.h; the op is
// ops/gelu_mlp.h): the forward of the first (epilogue GELU_AUX_BIAS: bias,
// GELU, and the pre-GELU values kept for the backward) and the input
// gradient of the second (DGELU_BGRAD: the product times GELU's derivative at
// the kept values, and the first linear's bias gradient, its column sums).
// Both kernels are declared by what they compute; the *Unfused functions
// compute it with a device's Linear, Matmul, unary and row-sum kernels, the
// same calls the three ops make one by one, which is what the CPU runs and
// what a device runs where it has no fused form for a shape or dtype.

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct LinearGeluTanhResult {
  Tensor y;    // gelu_tanh(pre)
  Tensor pre;  // x @ w^T + b
};
template <typename F>
LinearGeluTanhResult MapTensors(const LinearGeluTanhResult& r, F f) {
  return {f(r.y), f(r.pre)};
}

// Both results in `out`; b may be undefined.
struct LinearGeluTanhKernel {
  static constexpr const char* kName = "linear_gelu_tanh";
  static constexpr OpId kOps[] = {OpId::kGeluTanhMlp};
  using Fn = LinearGeluTanhResult (*)(const Tensor& x, const Tensor& w, const Tensor& b, DType out);
};

struct DGeluTanhResult {
  Tensor dpre;   // (dy @ w) * gelu_tanh'(pre), in pre's dtype
  Tensor dbias;  // dpre's column sums, in the requested dtype (undefined if not asked)
};
template <typename F>
DGeluTanhResult MapTensors(const DGeluTanhResult& r, F f) {
  return {f(r.dpre), f(r.dbias)};
}

// dy [M, N] @ w [N, K] through the GELU whose input was pre [M, K].
struct MatmulDGeluTanhKernel {
  static constexpr const char* kName = "matmul_dgelu_tanh";
  static constexpr OpId kOps[] = {OpId::kGeluTanhMlp};
  using Fn = DGeluTanhResult (*)(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                 bool bias_grad, DType bias_dtype);
};

// The same by x's device's Linear and unary kernels: pre rounded to `out`,
// then the GELU of the rounded values (ops Linear then GeluTanh).
LinearGeluTanhResult LinearGeluTanhUnfused(const Tensor& x, const Tensor& w, const Tensor& b,
                                           DType out);
// The same by the Matmul, unary-backward and row-sum kernels: dy @ w rounded
// to pre's dtype, times the derivative, rounded, then summed (the gradients
// of ops Linear, GeluTanh and Linear, in that order).
DGeluTanhResult MatmulDGeluTanhUnfused(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                       bool bias_grad, DType bias_dtype);

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_GELU_MLP_H_
