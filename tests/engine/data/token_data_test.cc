// Token data for language models: llm.c shards (both formats, every error
// naming the file and byte), byte-level text and its held-out split, the
// fortunes corpus, and seeded windows that resume exactly.

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/data/text_tokens.h"
#include "engine/data/token_sequence.h"
#include "engine/data/token_shard.h"
#include "engine/data/token_windows.h"
#include "gtest/gtest.h"

namespace ampd::engine::data {
namespace {

// A shard as llm.c's write_datafile writes it, by hand.
std::string Shard(int32_t magic, int32_t version, int32_t count, const std::vector<uint32_t>& toks,
                  int width) {
  std::string b(kShardHeaderBytes, '\0');
  std::memcpy(&b[0], &magic, 4);
  std::memcpy(&b[4], &version, 4);
  std::memcpy(&b[8], &count, 4);
  for (uint32_t t : toks) {
    if (width == 2) {
      const uint16_t v = static_cast<uint16_t>(t);
      b.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      b.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  return b;
}

std::vector<uint32_t> Values(const TokenSequence& s) {
  std::vector<uint32_t> v;
  for (int64_t i = 0; i < s.size(); ++i) v.push_back(s[i]);
  return v;
}

TEST(TokenShardTest, ReadsBothFormats) {
  absl::StatusOr<TokenSequence> u16 =
      ParseTokenShard(Shard(20240520, 1, 4, {50256, 0, 7, 65535}, 2), "a.bin", 0);
  ASSERT_TRUE(u16.ok()) << u16.status();
  EXPECT_EQ(u16->width(), 2);
  EXPECT_EQ(Values(*u16), (std::vector<uint32_t>{50256, 0, 7, 65535}));
  absl::StatusOr<TokenSequence> u32 =
      ParseTokenShard(Shard(20240801, 7, 3, {128000, 1, 70000}, 4), "b.bin", 128256);
  ASSERT_TRUE(u32.ok()) << u32.status();
  EXPECT_EQ(u32->width(), 4);
  EXPECT_EQ(Values(*u32), (std::vector<uint32_t>{128000, 1, 70000}));
  // And what EncodeTokenShard writes reads back.
  EXPECT_EQ(Values(*ParseTokenShard(EncodeTokenShard(*u32), "c.bin", 0)), Values(*u32));
  EXPECT_EQ(EncodeTokenShard(*u16), Shard(20240520, 1, 4, {50256, 0, 7, 65535}, 2));
}

TEST(TokenShardTest, EveryErrorNamesTheFileAndTheByte) {
  auto error = [](const std::string& bytes, int64_t vocab = 50257) {
    absl::StatusOr<TokenSequence> s = ParseTokenShard(bytes, "train_000.bin", vocab);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.status().message());
  };
  EXPECT_EQ(error(std::string(100, '\0')),
            "train_000.bin: truncated header: 100 bytes, a shard starts with 1024 (at byte 100)");
  EXPECT_EQ(error(Shard(12345, 1, 0, {}, 2)),
            "train_000.bin: bad magic 12345 (an llm.c token shard has 20240520 or 20240801) (at "
            "byte 0)");
  EXPECT_EQ(error(Shard(20240520, 7, 0, {}, 2)),
            "train_000.bin: version 7 with magic 20240520, want 1 (at byte 4)");
  EXPECT_EQ(error(Shard(20240801, 1, 0, {}, 4)),
            "train_000.bin: version 1 with magic 20240801, want 7 (at byte 4)");
  EXPECT_EQ(error(Shard(20240520, 1, 5, {1, 2, 3}, 2)),
            "train_000.bin: truncated: the header says 5 tokens (1034 bytes), the file has 1030 "
            "(at byte 1030)");
  EXPECT_EQ(error(Shard(20240520, 1, 2, {1, 2, 3}, 2)),
            "train_000.bin: 2 bytes after the 2 tokens (at byte 1028)");
  EXPECT_EQ(error(Shard(20240520, 1, 3, {1, 50257, 3}, 2)),
            "train_000.bin: token 50257 is not below vocab_size 50257 (at byte 1026)");
  // Without a vocabulary an id must still fit the batches' int32.
  EXPECT_EQ(error(Shard(20240801, 7, 2, {5, 0x80000000u}, 4), 0),
            "train_000.bin: token 2147483648 is over the largest id, 2147483647 (at byte 1028)");
  EXPECT_EQ(error(Shard(20240520, 1, -1, {}, 2)),
            "train_000.bin: negative token count -1 (at byte 8)");
  absl::StatusOr<TokenSequence> missing = ReadTokenShard("/nonexistent/x.bin", 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/x.bin"), std::string::npos);
}

TEST(TokenShardTest, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "/shard.bin";
  std::ofstream(path, std::ios::binary) << Shard(20240520, 1, 3, {5, 6, 7}, 2);
  absl::StatusOr<TokenSequence> s = ReadTokenShard(path, 8);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Values(*s), (std::vector<uint32_t>{5, 6, 7}));
  EXPECT_EQ(s->name(), path);
}

TEST(TextTokensTest, BytesAreTokensAndTheHeldOutPartIsTheEnd) {
  const TokenSequence t = ByteTokens("h\xc3\xa9llo", "text");
  EXPECT_EQ(Values(t), (std::vector<uint32_t>{'h', 0xc3, 0xa9, 'l', 'l', 'o'}));
  const TokenSplit split = SplitHeldOut(ByteTokens("abcdefghij"), 0.2);
  EXPECT_EQ(Values(split.train), Values(ByteTokens("abcdefgh")));
  EXPECT_EQ(Values(split.val), Values(ByteTokens("ij")));
  EXPECT_EQ(SplitHeldOut(ByteTokens("abc"), 0.0).val.size(), 0);
}

TEST(TextTokensTest, TheFortunesCorpusIsCleanEnglishText) {
  absl::StatusOr<std::string> text = ReadFortunes();
  if (!text.ok() && text.status().code() == absl::StatusCode::kNotFound) {
    GTEST_SKIP() << text.status();  // tools/setup installs it; CI has it
  }
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_GT(text->size(), 2'000'000u);
  EXPECT_LT(text->size(), 3'500'000u);
  EXPECT_EQ(text->find('\b'), std::string::npos);
  EXPECT_EQ(text->find("\n%\n"), std::string::npos);
  // The same bytes every time (name order), so a seed means the same batches.
  EXPECT_EQ(*ReadFortunes(), *text);
  EXPECT_EQ(ReadFortunes("/nonexistent").status().code(), absl::StatusCode::kNotFound);
}

TEST(TextTokensTest, FortuneFilesLoseSeparatorsAndOverstriking) {
  const std::string dir = ::testing::TempDir() + "/fortunes";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/b") << "second\n%\n";
  std::ofstream(dir + "/a") << "B\bBold and _\bu\n%\nnext\n";
  std::ofstream(dir + "/a.dat") << "index";
  absl::StatusOr<std::string> text = ReadFortunes(dir);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Bold and u\n\nnext\nsecond\n\n");
}

TokenSequence Counting(int64_t n, std::string name = "") {
  std::vector<uint16_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(i % 60000);
  return TokenSequence::FromU16(std::move(v), std::move(name));
}

TEST(TokenWindowsTest, WindowsAreContiguousShiftedAndSeeded) {
  const TokenSequence s = Counting(1000);
  absl::StatusOr<TokenWindows> w = TokenWindows::Create({&s}, 16, 42);
  ASSERT_TRUE(w.ok()) << w.status();
  const TokenBatch b = w->Next(8);
  ASSERT_EQ(b.inputs.size(), 8u * 16);
  std::set<int32_t> starts;
  for (int i = 0; i < 8; ++i) {
    const int32_t first = b.inputs[i * 16];
    starts.insert(first);
    EXPECT_LE(first + 16, 999);  // block + 1 tokens inside the sequence
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(b.inputs[i * 16 + t], first + t);
      EXPECT_EQ(b.targets[i * 16 + t], first + t + 1);
    }
  }
  EXPECT_GT(starts.size(), 4u);  // random, not one window repeated
  absl::StatusOr<TokenWindows> same = TokenWindows::Create({&s}, 16, 42);
  EXPECT_EQ(same->Next(8).inputs, b.inputs);
  absl::StatusOr<TokenWindows> other = TokenWindows::Create({&s}, 16, 43);
  EXPECT_NE(other->Next(8).inputs, b.inputs);
}

TEST(TokenWindowsTest, APositionResumesTheSameWindows) {
  const TokenSequence s = Counting(5000);
  TokenWindows run = *TokenWindows::Create({&s}, 32, 7);
  run.Next(4);
  run.Next(4);
  const int64_t checkpoint = run.position();
  EXPECT_EQ(checkpoint, 8);
  const TokenBatch third = run.Next(4);
  TokenWindows resumed = *TokenWindows::Create({&s}, 32, 7);
  resumed.set_position(checkpoint);
  EXPECT_EQ(resumed.Next(4).inputs, third.inputs);
}

TEST(TokenWindowsTest, WindowsStayInsideOneShardDrawnByItsSize) {
  const TokenSequence small = Counting(110, "small"), large = Counting(1010, "large");
  TokenWindows w = *TokenWindows::Create({&small, &large}, 10, 1);
  std::map<int, int> per_shard;
  for (int64_t k = 0; k < 20000; ++k) {
    const auto [shard, start] = w.WindowStart(k);
    ++per_shard[shard];
    const int64_t len = shard == 0 ? 110 : 1010;
    ASSERT_GE(start, 0);
    ASSERT_LE(start + 11, len) << "window " << k << " crosses the end of shard " << shard;
  }
  // 100 and 1000 windows: about 1 in 11 draws from the small shard.
  EXPECT_NEAR(per_shard[0] / 20000.0, 100.0 / 1100.0, 0.01);
}

TEST(TokenWindowsTest, TooShortIsAClearError) {
  const TokenSequence s = Counting(16, "val.bin");
  absl::StatusOr<TokenWindows> w = TokenWindows::Create({&s}, 16, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().message(),
            "no training window of block_size + 1 = 17 tokens fits: the longest token sequence "
            "(val.bin) has 16");
  EXPECT_FALSE(TokenWindows::Create({&s}, 0, 0).ok());
}

TEST(TokenWindowsTest, EvalWindowsAreConsecutiveAndFixed) {
  const TokenSequence s = Counting(100);
  const std::vector<TokenBatch> batches = EvalWindows(s, 10, 4, 0);
  // (100 - 1) / 10 = 9 windows: 4 + 4 + 1.
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].batch, 1);
  EXPECT_EQ(batches[1].inputs[0], 40);
  EXPECT_EQ(batches[2].targets.back(), 90);
  EXPECT_EQ(EvalWindows(s, 10, 4, 5).size(), 2u);
}

}  // namespace
}  // namespace ampd::engine::data
