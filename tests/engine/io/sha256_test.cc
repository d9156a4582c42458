#include "engine/io/sha256.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/engine/io/io_test_util.h"

namespace ampd::engine::io {
namespace {

// FIPS 180-4 / NIST CSRC example vectors.
TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256HexOfBytes(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256HexOfBytes("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256HexOfBytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256HexOfBytes(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PaddingBoundaries) {
  // 55, 56, 63, 64 and 65 bytes straddle the one/two padding block cases.
  EXPECT_EQ(Sha256HexOfBytes(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(Sha256HexOfBytes(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(Sha256HexOfBytes(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256Test, StreamingInAnyChunksMatchesOneShot) {
  std::string data;
  for (int i = 0; i < 5000; ++i) data.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
  const std::string expected = Sha256HexOfBytes(data);
  for (size_t chunk : {1, 3, 63, 64, 65, 127, 4096}) {
    Sha256 hash;
    for (size_t i = 0; i < data.size(); i += chunk) {
      hash.Update(data.data() + i, std::min(chunk, data.size() - i));
    }
    EXPECT_EQ(hash.FinishHex(), expected) << "chunk " << chunk;
  }
  // Finish() resets: the object hashes a new message afterwards.
  Sha256 hash;
  hash.Update("xyz");
  hash.Finish();
  hash.Update("abc");
  EXPECT_EQ(hash.FinishHex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, File) {
  const std::string dir = testing::MakeTempDir();
  const std::string path = dir + "/million_a";
  testing::WriteBytes(path, std::string(1000000, 'a'));
  absl::StatusOr<std::string> hex = Sha256FileHex(path);
  ASSERT_TRUE(hex.ok()) << hex.status();
  EXPECT_EQ(*hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  absl::StatusOr<std::string> missing = Sha256FileHex(dir + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir + "/nope"), std::string::npos) << missing.status();
  EXPECT_NE(missing.status().message().find("No such file"), std::string::npos) << missing.status();
}

}  // namespace
}  // namespace ampd::engine::io
