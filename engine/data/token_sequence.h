#ifndef AMPD_ENGINE_DATA_TOKEN_SEQUENCE_H_
#define AMPD_ENGINE_DATA_TOKEN_SEQUENCE_H_

// A language-model data set: one long sequence of token ids (a shard, or a
// text's bytes), kept at the width it was stored in (uint16 for GPT-2-sized
// vocabularies, uint32 beyond), so a 100M-token shard takes 200 MB, not 400.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampd::engine::data {

class TokenSequence {
 public:
  TokenSequence() = default;
  static TokenSequence FromU16(std::vector<uint16_t> tokens, std::string name = "") {
    TokenSequence s;
    s.u16_ = std::move(tokens);
    s.name_ = std::move(name);
    return s;
  }
  static TokenSequence FromU32(std::vector<uint32_t> tokens, std::string name = "") {
    TokenSequence s;
    s.wide_ = true;
    s.u32_ = std::move(tokens);
    s.name_ = std::move(name);
    return s;
  }

  int64_t size() const {
    return wide_ ? static_cast<int64_t>(u32_.size()) : static_cast<int64_t>(u16_.size());
  }
  uint32_t operator[](int64_t i) const { return wide_ ? u32_[i] : u16_[i]; }
  // 2 or 4: the bytes per token as stored.
  int width() const { return wide_ ? 4 : 2; }
  // Where it came from (a file name, "fortunes"), for error messages.
  const std::string& name() const { return name_; }
  // Tokens [begin, end) as a new sequence (same width and name).
  TokenSequence Slice(int64_t begin, int64_t end) const {
    if (wide_) {
      return FromU32(std::vector<uint32_t>(u32_.begin() + begin, u32_.begin() + end), name_);
    }
    return FromU16(std::vector<uint16_t>(u16_.begin() + begin, u16_.begin() + end), name_);
  }

 private:
  bool wide_ = false;
  std::vector<uint16_t> u16_;
  std::vector<uint32_t> u32_;
  std::string name_;
};

}  // namespace ampd::engine::data

#endif  // AMPD_ENGINE_DATA_TOKEN_SEQUENCE_H_
