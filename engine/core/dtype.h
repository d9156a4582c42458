#ifndef AMPD_ENGINE_CORE_DTYPE_H_
#define AMPD_ENGINE_CORE_DTYPE_H_

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"

namespace ampd::engine::core {

// Element types. f64 exists for reference computations and gradient checks;
// autocast never touches it (as in torch.autocast).
// kU8 is a storage type (blockwise-quantized optimizer states, safetensors
// "U8"): tensors of it are created, copied, moved and checkpointed, and their
// values convert to and from float as the integers 0..255; no op computes
// in it.
enum class DType { kF32, kF16, kBF16, kF64, kU8 };

std::string_view DTypeName(DType dtype);  // "f32", "f16", "bf16", "f64", "u8"
// Accepts the names above plus "float32", "float16", "bfloat16", "float64".
absl::StatusOr<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType dtype);
bool IsLowPrecision(DType dtype);  // f16 or bf16
// torch.result_type-style promotion: the wider type; f16 with bf16 gives f32.
DType PromoteTypes(DType a, DType b);

}  // namespace ampd::engine::core

namespace ampd::engine {  // vocabulary (see core/tensor.h)
using core::DType;
using core::DTypeName;
using core::DTypeSize;

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_CORE_DTYPE_H_
