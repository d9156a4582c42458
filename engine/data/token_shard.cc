#include "engine/data/token_shard.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ampd::engine::data {
namespace {

// The formats are little-endian, as is every machine ampd builds for.
int32_t HeaderWord(std::string_view bytes, int i) {
  int32_t v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

absl::Status Bad(const std::string& name, int64_t offset, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", what, " (at byte ", offset, ")"));
}

template <typename T>
absl::StatusOr<std::vector<T>> Tokens(std::string_view bytes, const std::string& name,
                                      int64_t count, int64_t vocab_size) {
  std::vector<T> tokens(count);
  if (count > 0) std::memcpy(tokens.data(), bytes.data() + kShardHeaderBytes, count * sizeof(T));
  // Ids become int32 in batches, so without a vocabulary they must still fit.
  const int64_t limit = vocab_size > 0 ? vocab_size : kMaxTokenId + 1;
  for (int64_t i = 0; i < count; ++i) {
    if (static_cast<int64_t>(tokens[i]) >= limit) {
      return Bad(name, kShardHeaderBytes + i * static_cast<int64_t>(sizeof(T)),
                 vocab_size > 0
                     ? absl::StrCat("token ", tokens[i], " is not below vocab_size ", vocab_size)
                     : absl::StrCat("token ", tokens[i], " is over the largest id, ", kMaxTokenId));
    }
  }
  return tokens;
}

}  // namespace

absl::StatusOr<TokenSequence> ParseTokenShard(std::string_view bytes, const std::string& name,
                                              int64_t vocab_size) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < kShardHeaderBytes) {
    return Bad(name, size,
               absl::StrCat("truncated header: ", size, " bytes, a shard starts with ",
                            kShardHeaderBytes));
  }
  const int32_t magic = HeaderWord(bytes, 0), version = HeaderWord(bytes, 1);
  int width = 0;
  if (magic == kShardMagicU16) {
    width = 2;
    if (version != kShardVersionU16) {
      return Bad(
          name, 4,
          absl::StrCat("version ", version, " with magic ", magic, ", want ", kShardVersionU16));
    }
  } else if (magic == kShardMagicU32) {
    width = 4;
    if (version != kShardVersionU32) {
      return Bad(
          name, 4,
          absl::StrCat("version ", version, " with magic ", magic, ", want ", kShardVersionU32));
    }
  } else {
    return Bad(name, 0,
               absl::StrCat("bad magic ", magic, " (an llm.c token shard has ", kShardMagicU16,
                            " or ", kShardMagicU32, ")"));
  }
  const int64_t count = HeaderWord(bytes, 2);
  if (count < 0) return Bad(name, 8, absl::StrCat("negative token count ", count));
  const int64_t want = kShardHeaderBytes + count * width;
  if (size < want) {
    return Bad(name, size,
               absl::StrCat("truncated: the header says ", count, " tokens (", want,
                            " bytes), the file has ", size));
  }
  if (size > want) {
    return Bad(name, want, absl::StrCat(size - want, " bytes after the ", count, " tokens"));
  }
  if (width == 2) {
    absl::StatusOr<std::vector<uint16_t>> t = Tokens<uint16_t>(bytes, name, count, vocab_size);
    if (!t.ok()) return t.status();
    return TokenSequence::FromU16(*std::move(t), name);
  }
  absl::StatusOr<std::vector<uint32_t>> t = Tokens<uint32_t>(bytes, name, count, vocab_size);
  if (!t.ok()) return t.status();
  return TokenSequence::FromU32(*std::move(t), name);
}

absl::StatusOr<TokenSequence> ReadTokenShard(const std::string& path, int64_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the token shard"));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return ParseTokenShard(bytes, path, vocab_size);
}

std::string EncodeTokenShard(const TokenSequence& tokens) {
  bool fits16 = true;
  for (int64_t i = 0; i < tokens.size() && fits16; ++i) fits16 = tokens[i] <= 0xFFFF;
  const int width = fits16 ? 2 : 4;
  std::string out(kShardHeaderBytes + tokens.size() * width, '\0');
  const int32_t header[3] = {fits16 ? kShardMagicU16 : kShardMagicU32,
                             fits16 ? kShardVersionU16 : kShardVersionU32,
                             static_cast<int32_t>(tokens.size())};
  std::memcpy(out.data(), header, sizeof(header));
  for (int64_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = tokens[i];
    if (fits16) {
      const uint16_t v = static_cast<uint16_t>(t);
      std::memcpy(out.data() + kShardHeaderBytes + 2 * i, &v, 2);
    } else {
      std::memcpy(out.data() + kShardHeaderBytes + 4 * i, &t, 4);
    }
  }
  return out;
}

}  // namespace ampd::engine::data
