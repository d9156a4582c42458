#ifndef AMPD_ENGINE_BACKEND_KERNELS_MATMUL_H_
#define AMPD_ENGINE_BACKEND_KERNELS_MATMUL_H_

// The GEMM kernels (kernel_registry.h). Inputs 2-D and of one dtype; f32
// accumulation (f64 for f64), one rounding into `out`.

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

// op(a) @ op(b).
struct MatmulKernel {
  static constexpr const char* kName = "matmul";
  static constexpr OpId kOps[] = {OpId::kMatmul, OpId::kLinear, OpId::kLmHeadCrossEntropy,
                                  OpId::kFp8Linear, OpId::kGeluTanhMlp};
  using Fn = Tensor (*)(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out);
};

// x @ w^T + b (b may be undefined): a Linear forward. Device backends fuse the
// bias into the GEMM epilogue (one rounding instead of two).
struct LinearKernel {
  static constexpr const char* kName = "linear";
  static constexpr OpId kOps[] = {OpId::kLinear, OpId::kFp8Linear, OpId::kGeluTanhMlp};
  using Fn = Tensor (*)(const Tensor& x, const Tensor& w, const Tensor& b, DType out);
};

// The unfused Linear: the Matmul and (if b) Add kernels of x's device. What a
// backend runs where it has no fused form.
Tensor LinearByMatmul(const Tensor& x, const Tensor& w, const Tensor& b, DType out);

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_MATMUL_H_
