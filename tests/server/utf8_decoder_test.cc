// Generate's UTF-8 decoder (server/generation.h): byte-level tokens become
// whole characters, a character split across tokens waits for its last byte,
// and anything protobuf would refuse as a string (overlong forms, surrogates,
// past U+10FFFF, stray continuation bytes, a character cut short) becomes
// U+FFFD, so every response's text is valid UTF-8.
#include "gtest/gtest.h"
#include "server/generation.h"

namespace ampd::server {
namespace {

std::string Decode(const std::string& bytes) {
  Utf8Decoder d;
  std::string out;
  for (unsigned char b : bytes) out += d.Push(b);
  return out + d.Flush();
}

constexpr char kBad[] = "\xEF\xBF\xBD";

TEST(Utf8DecoderTest, WholeCharactersPassAndWaitForTheirLastByte) {
  Utf8Decoder d;
  EXPECT_EQ(d.Push('a'), "a");
  EXPECT_EQ(d.Push(0xE2), "");  // U+20AC, the euro sign
  EXPECT_EQ(d.Push(0x82), "");
  EXPECT_EQ(d.Push(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(Decode("h\xC3\xA9llo \xF0\x9F\x98\x80"), "h\xC3\xA9llo \xF0\x9F\x98\x80");
}

TEST(Utf8DecoderTest, WhatIsNotUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(Decode("\x80"), kBad);                                     // stray continuation
  EXPECT_EQ(Decode("\xC0\xAF"), std::string(kBad) + kBad);             // overlong lead
  EXPECT_EQ(Decode("\xE0\x80\x80"), std::string(kBad) + kBad + kBad);  // overlong 3-byte
  EXPECT_EQ(Decode("\xED\xA0\x80"), std::string(kBad) + kBad + kBad);  // a surrogate
  EXPECT_EQ(Decode("\xF4\x90\x80\x80"), std::string(kBad) + kBad + kBad + kBad);  // > U+10FFFF
  EXPECT_EQ(Decode("\xFF"), kBad);
  EXPECT_EQ(Decode("\xE2\x82"
                   "a"),
            std::string(kBad) + "a");                         // cut short, then ASCII
  EXPECT_EQ(Decode("ab\xE2\x82"), std::string("ab") + kBad);  // cut short at the end
}

}  // namespace
}  // namespace ampd::server
