#ifndef AMPD_ENGINE_DATA_TOKEN_WINDOWS_H_
#define AMPD_ENGINE_DATA_TOKEN_WINDOWS_H_

// Training batches for a language model: random contiguous windows of
// block_size + 1 tokens (inputs are the first block_size, targets the same
// shifted by one), as nanoGPT samples them. A window never crosses from one
// shard into the next; shards are drawn in proportion to their windows.
//
// Window k of a run starts where a counter-based hash of (seed, k) says, so
// the sampler's whole state is the number of windows drawn (`position`): a
// checkpoint stores it, and a resumed run draws exactly the windows the
// uninterrupted one would have.

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/data/token_sequence.h"

namespace ampd::engine::data {

struct TokenBatch {
  int64_t batch = 0, block = 0;
  std::vector<int32_t> inputs;   // batch * block, row-major
  std::vector<int32_t> targets;  // the same windows shifted by one token
};

class TokenWindows {
 public:
  // INVALID_ARGUMENT when block_size < 1 or no shard holds block_size + 1
  // tokens (naming the longest).
  static absl::StatusOr<TokenWindows> Create(std::vector<const TokenSequence*> shards,
                                             int64_t block_size, uint64_t seed);

  TokenBatch Next(int64_t batch);
  // The start (shard, offset) of window k: what Next draws, in order.
  std::pair<int, int64_t> WindowStart(int64_t k) const;

  int64_t position() const { return position_; }
  void set_position(int64_t windows_drawn) { position_ = windows_drawn; }
  int64_t block_size() const { return block_; }

 private:
  TokenWindows() = default;
  std::vector<const TokenSequence*> shards_;
  std::vector<int64_t> first_window_;  // per shard: windows before it
  int64_t total_windows_ = 0;
  int64_t block_ = 0;
  uint64_t seed_ = 0;
  int64_t position_ = 0;
};

// Evaluation windows: consecutive, non-overlapping windows from the start of
// `tokens`, at most `max_windows` (<= 0: all), in batches of `batch` (the
// last may be smaller). The same every time.
std::vector<TokenBatch> EvalWindows(const TokenSequence& tokens, int64_t block_size, int64_t batch,
                                    int64_t max_windows);

}  // namespace ampd::engine::data

#endif  // AMPD_ENGINE_DATA_TOKEN_WINDOWS_H_
