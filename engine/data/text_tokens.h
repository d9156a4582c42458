#ifndef AMPD_ENGINE_DATA_TEXT_TOKENS_H_
#define AMPD_ENGINE_DATA_TEXT_TOKENS_H_

// Raw text as tokens with a byte-level tokenizer: each byte of the UTF-8 text
// is one token (vocabulary 256), so any text trains with no tokenizer files.
// And the built-in corpus `fortunes`: Debian's `fortunes` package.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/data/token_sequence.h"

namespace ampd::engine::data {

inline constexpr int64_t kByteVocabSize = 256;

TokenSequence ByteTokens(std::string_view text, std::string name = "");

// The tokens split into train and held-out: the last `held_out_fraction` of
// them (at least one window's worth is the caller's to check) are the
// validation set. Fraction in [0, 1).
struct TokenSplit {
  TokenSequence train, val;
};
TokenSplit SplitHeldOut(const TokenSequence& tokens, double held_out_fraction);

// The `fortunes` corpus: every fortune file under `dir` (the files without
// .dat/.u8: those are indexes and links), in name order, with the `%` lines
// that separate entries replaced by blank lines and overstriking (x BS x)
// removed. About 2.6 MB of English text.
inline constexpr char kFortunesDir[] = "/usr/share/games/fortunes";
absl::StatusOr<std::string> ReadFortunes(const std::string& dir = kFortunesDir);

}  // namespace ampd::engine::data

#endif  // AMPD_ENGINE_DATA_TEXT_TOKENS_H_
