#include "engine/io/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace ampd::engine::io {
namespace {

uint32_t Crc(const std::string& s) { return Crc32c(s.data(), s.size()); }

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(Crc(""), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, and an ascending run.
  EXPECT_EQ(Crc(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Crc(ascending), 0x46DD794Eu);
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  const uint32_t whole = Crc(data);
  for (size_t split = 0; split <= data.size(); split += 37) {
    const uint32_t head = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32cExtend(head, data.data() + split, data.size() - split), whole) << split;
  }
  // Every alignment and tail length of the 4-byte fast path against byte-wise extension.
  for (size_t start = 0; start < 8; ++start) {
    for (size_t len = 0; len < 40; ++len) {
      uint32_t bytewise = 0;
      for (size_t i = 0; i < len; ++i)
        bytewise = Crc32cExtend(bytewise, data.data() + start + i, 1);
      EXPECT_EQ(Crc32c(data.data() + start, len), bytewise) << start << " " << len;
    }
  }
}

TEST(Crc32cTest, Mask) {
  const uint32_t crc = Crc("123456789");
  EXPECT_EQ(MaskCrc32c(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_NE(MaskCrc32c(crc), crc);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(crc)), crc);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(0)), 0u);
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(0xFFFFFFFFu)), 0xFFFFFFFFu);
}

}  // namespace
}  // namespace ampd::engine::io
