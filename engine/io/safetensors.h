#ifndef AMPD_ENGINE_IO_SAFETENSORS_H_
#define AMPD_ENGINE_IO_SAFETENSORS_H_

// The safetensors format (https://github.com/huggingface/safetensors), as read
// by safetensors.torch.load_file and the Hugging Face tools:
//
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   a JSON object, padded with spaces:
//               {"__metadata__": {"key": "value", ...},
//                "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]},
//                ...}
//   the data  the tensors' raw little-endian row-major bytes; offsets are
//             relative to the start of this section, which they cover exactly
//             (no gaps, no overlaps, nothing after the last tensor)
//
// The writer pads the header so the data starts at a multiple of 8 bytes,
// writes tensors back to back in the order given, and replaces the file
// atomically (engine/io/atomic_file.h). The reader is strict and total: any
// input (truncated, corrupt, hostile) yields an error naming the path and the
// byte offset, never a crash or an allocation larger than the file.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"

namespace ampd::engine::io {

// "F32", "F16", "BF16", "F64": the safetensors names of the engine's dtypes.
const char* SafetensorsDTypeName(DType dtype);

// Writes `tensors` (CPU tensors, any dtype; unique names other than
// "__metadata__", valid UTF-8) and `metadata` (omitted when empty) to `path`.
// Errors name the path and the errno text; on any error `path` is unchanged
// and no temporary file is left. When `sha256_hex` is given it receives the
// SHA-256 of the file written, for checkpoint manifests.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              std::string* sha256_hex = nullptr);

// One tensor's header entry.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to data_start
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order (by offset)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N
};

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::vector<std::string> names;  // in data order (the order they were written)
  std::map<std::string, std::string> metadata;
};

// Reads and validates the whole file.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);
// Reads and validates the header only (the file's size is checked against it).
absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);
// The same parser over bytes in memory (for fuzzing and for callers that have
// the file already); `source` names it in errors.
absl::StatusOr<SafetensorsFile> ParseSafetensors(const void* data, size_t size,
                                                 const std::string& source);

}  // namespace ampd::engine::io

#endif  // AMPD_ENGINE_IO_SAFETENSORS_H_
