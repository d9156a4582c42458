#ifndef AMPD_ENGINE_BACKEND_KERNELS_CAST_H_
#define AMPD_ENGINE_BACKEND_KERNELS_CAST_H_

// The dtype conversion kernel (kernel_registry.h): always a new tensor, even
// when the dtype is x's; f16/bf16 rounding is round-to-nearest-even.

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct CastKernel {
  static constexpr const char* kName = "cast";
  static constexpr OpId kOps[] = {OpId::kCast, OpId::kFp8Linear};
  using Fn = Tensor (*)(const Tensor& x, DType dtype);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_CAST_H_
