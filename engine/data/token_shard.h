#ifndef AMPD_ENGINE_DATA_TOKEN_SHARD_H_
#define AMPD_ENGINE_DATA_TOKEN_SHARD_H_

// Token shards in llm.c's (and nanoGPT's) .bin format: a header of 256
// little-endian int32 (magic, version, token count, then zeros) followed by
// the tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2's vocabulary);
//   magic 20240801, version 7: uint32 tokens (larger vocabularies).
// Errors (INVALID_ARGUMENT, NOT_FOUND for a missing file) name the file and
// the byte offset: a bad magic or version, a header shorter than 1024 bytes,
// a count the file does not hold, trailing bytes, a token >= vocab_size.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/data/token_sequence.h"

namespace ampd::engine::data {

inline constexpr int32_t kShardMagicU16 = 20240520;
inline constexpr int32_t kShardVersionU16 = 1;
inline constexpr int32_t kShardMagicU32 = 20240801;
inline constexpr int32_t kShardVersionU32 = 7;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;
// Batches hold ids as int32: the largest a shard may contain, vocabulary or not.
inline constexpr int64_t kMaxTokenId = 2147483647;

// `bytes` is the whole file; `name` is what errors call it. vocab_size <= 0:
// no vocabulary bound (ids still at most kMaxTokenId).
absl::StatusOr<TokenSequence> ParseTokenShard(std::string_view bytes, const std::string& name,
                                              int64_t vocab_size);
absl::StatusOr<TokenSequence> ReadTokenShard(const std::string& path, int64_t vocab_size);

// The file's bytes for `tokens` (the uint16 format when every id fits in 16
// bits, else the uint32 one): what tests and exporters write.
std::string EncodeTokenShard(const TokenSequence& tokens);

}  // namespace ampd::engine::data

#endif  // AMPD_ENGINE_DATA_TOKEN_SHARD_H_
