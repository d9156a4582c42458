#include "engine/core/dtype.h"

#include <string>

#include "absl/status/status.h"

namespace ampd::engine::core {

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF64:
      return "f64";
    case DType::kU8:
      return "u8";
  }
  // Only reachable through a cast from an out-of-range integer; a visible
  // name makes such a bug show up in logs instead of crashing.
  return "invalid";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f64" || name == "float64") return DType::kF64;
  if (name == "u8" || name == "uint8") return DType::kU8;
  // Debian's abseil has its own string_view type (ABSL_OPTION_USE_STD_STRING_VIEW
  // is 0), so StrCat does not take std::string_view; plain std::string does.
  std::string message = "unknown dtype \"";
  message.append(name);
  message.append("\"; expected one of f32, f16, bf16, f64, float32, float16, bfloat16, float64");
  return absl::InvalidArgumentError(message);
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 0;
}

bool IsLowPrecision(DType dtype) { return dtype == DType::kF16 || dtype == DType::kBF16; }

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kF64 || b == DType::kF64) return DType::kF64;
  // Neither f16 nor bf16 holds the other (range vs. precision), so any mixed
  // pair below f64 meets at f32, as torch.result_type does.
  return DType::kF32;
}

}  // namespace ampd::engine::core
