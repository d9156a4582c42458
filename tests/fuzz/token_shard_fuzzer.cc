// libFuzzer target: ParseTokenShard (llm.c .bin shards) on arbitrary bytes,
// then training windows over what it accepts. Build and run with tools/fuzz.
//
// Input layout: byte 0 picks the vocabulary bound (none, 256, 50257, 128256)
// and the block size (bits 2..7, plus 1); the rest is the shard file.
// Accepted shards must hold exactly the header's count of in-vocabulary
// tokens, re-encode to the same values, and give windows inside the data.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/data/token_sequence.h"
#include "engine/data/token_shard.h"
#include "engine/data/token_windows.h"

namespace data = ampd::engine::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size < 1) return 0;
  static constexpr int64_t kVocab[] = {0, 256, 50257, 128256};
  const int64_t vocab = kVocab[bytes[0] & 3];
  const int64_t block = (bytes[0] >> 2) + 1;
  const std::string_view file(reinterpret_cast<const char*>(bytes + 1), size - 1);
  absl::StatusOr<data::TokenSequence> s = data::ParseTokenShard(file, "fuzz.bin", vocab);
  if (!s.ok()) {
    if (s.status().message().find("fuzz.bin: ") != 0) std::abort();  // names the file
    return 0;
  }
  if (data::kShardHeaderBytes + s->size() * s->width() != static_cast<int64_t>(file.size())) {
    std::abort();
  }
  for (int64_t i = 0; i < s->size(); ++i) {
    if (vocab > 0 && (*s)[i] >= vocab) std::abort();
  }
  absl::StatusOr<data::TokenSequence> again =
      data::ParseTokenShard(data::EncodeTokenShard(*s), "again.bin", vocab);
  if (!again.ok() || again->size() != s->size()) std::abort();
  for (int64_t i = 0; i < s->size(); ++i) {
    if ((*again)[i] != (*s)[i]) std::abort();
  }
  absl::StatusOr<data::TokenWindows> w = data::TokenWindows::Create({&*s}, block, bytes[0]);
  if (!w.ok()) {
    if (s->size() > block) std::abort();  // a window fits, so it must be accepted
    return 0;
  }
  const data::TokenBatch b = w->Next(3);
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    if (b.inputs[i] < 0 || b.targets[i] < 0) std::abort();
  }
  return 0;
}
