#ifndef AMPD_ENGINE_BACKEND_KERNELS_ELEMENTWISE_H_
#define AMPD_ENGINE_BACKEND_KERNELS_ELEMENTWISE_H_

// The elementwise kernels (kernel_registry.h): the unary and binary families
// (IsUnaryOp/IsBinaryOp in op_list.h), scaling and in-place accumulation.

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

inline constexpr OpId kUnaryOps[] = {OpId::kRelu, OpId::kGelu, OpId::kGeluTanh, OpId::kNeg,
                                     OpId::kExp,  OpId::kLog,  OpId::kSquare};

// op(x), in x's dtype.
struct UnaryKernel {
  static constexpr const char* kName = "unary";
  static constexpr const OpId (&kOps)[7] = kUnaryOps;
  using Fn = Tensor (*)(OpId op, const Tensor& x);
};
// d(op(x))/dx * dy, stored in the dtype of dy.
struct UnaryBackwardKernel {
  static constexpr const char* kName = "unary_backward";
  static constexpr const OpId (&kOps)[7] = kUnaryOps;
  using Fn = Tensor (*)(OpId op, const Tensor& x, const Tensor& dy);
};
// a (op) b where b has a's shape, or is a row vector broadcast over the last
// dim of a, or a scalar (numel 1). Sum and mean use mul in their gradients.
struct BinaryKernel {
  static constexpr const char* kName = "binary";
  static constexpr OpId kOps[] = {OpId::kAdd, OpId::kSub, OpId::kMul, OpId::kSum, OpId::kMean};
  using Fn = Tensor (*)(OpId op, const Tensor& a, const Tensor& b, DType out);
};
// x * factor (sub's gradient negates with it).
struct ScaleKernel {
  static constexpr const char* kName = "scale";
  static constexpr OpId kOps[] = {OpId::kMulScalar, OpId::kMean, OpId::kSub,
                                  OpId::kLmHeadCrossEntropy};
  using Fn = Tensor (*)(const Tensor& x, double factor, DType out);
};
// In place: x += alpha * y (same shape). Not autocast, never recorded: how
// gradients accumulate into leaves (listed under add, which every backward
// has).
struct AddInPlaceKernel {
  static constexpr const char* kName = "add_in_place";
  static constexpr OpId kOps[] = {OpId::kAdd, OpId::kLmHeadCrossEntropy};
  using Fn = void (*)(const Tensor& x, const Tensor& y, double alpha);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_ELEMENTWISE_H_
