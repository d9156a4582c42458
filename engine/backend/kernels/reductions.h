#ifndef AMPD_ENGINE_BACKEND_KERNELS_REDUCTIONS_H_
#define AMPD_ENGINE_BACKEND_KERNELS_REDUCTIONS_H_

// The reduction kernels (kernel_registry.h), summing in f64 in a fixed order.

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

// The sum of all elements: a 0-d tensor. Also the gradient of a binary op's
// scalar operand.
struct SumAllKernel {
  static constexpr const char* kName = "sum_all";
  static constexpr OpId kOps[] = {OpId::kSum, OpId::kMean, OpId::kAdd, OpId::kSub, OpId::kMul};
  using Fn = Tensor (*)(const Tensor& x, DType out);
};
// Sum over the rows of an [M, N] view: [N]. Bias and row-broadcast gradients.
struct SumRowsKernel {
  static constexpr const char* kName = "sum_rows";
  static constexpr OpId kOps[] = {OpId::kLinear, OpId::kAdd,       OpId::kSub,
                                  OpId::kMul,    OpId::kFp8Linear, OpId::kGeluTanhMlp};
  using Fn = Tensor (*)(const Tensor& x, DType out);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_REDUCTIONS_H_
