// The server's identity files (server/principal_files.h): what they accept,
// and errors that name the flag, the file and the line.
#include "server/principal_files.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::server {
namespace {

const std::string kDigest(64, 'a');

TEST(PrincipalFilesTest, TokensLinesGiveEachTokenItsPrincipalAndRole) {
  auto tokens =
      ParseTokens("# comment\n\n" + std::string(64, 'A') + " alice user\n" + std::string(64, '0') +
                      "\track-7 agent  # trailing\r\n" + std::string(64, 'f') + " root admin",
                  "t.txt");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 3u);
  const Principal& alice = tokens->at(kDigest);  // lowercased
  EXPECT_EQ(alice.name, "alice");
  EXPECT_FALSE(alice.admin || alice.agent);
  EXPECT_TRUE(tokens->at(std::string(64, '0')).agent);
  EXPECT_TRUE(tokens->at(std::string(64, 'f')).admin);
}

TEST(PrincipalFilesTest, BadTokensLinesAreRefusedByLine) {
  struct Case {
    std::string content, message;
  };
  for (const Case& c : {Case{"\n" + kDigest + " alice\n", "t.txt:2: expected \"SHA256HEX"},
                        Case{"abc alice user\n", "t.txt:1: the first field must be"},
                        Case{kDigest + " alice root\n", "t.txt:1: role must be"}}) {
    auto tokens = ParseTokens(c.content, "t.txt");
    ASSERT_FALSE(tokens.ok()) << c.content;
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(tokens.status().message().find("tokens_file: " + c.message), std::string::npos)
        << tokens.status();
  }
  EXPECT_EQ(ReadTokensFile("/nonexistent/tokens").status().code(), absl::StatusCode::kNotFound);
}

TEST(PrincipalFilesTest, CertificateRolesNameIdentitiesOnce) {
  auto roles = ParseCertRoles("rack-9 agent # a rack\nbob admin\ncarol user\n", "r.txt");
  ASSERT_TRUE(roles.ok()) << roles.status();
  EXPECT_TRUE(roles->at("rack-9").agent);
  EXPECT_TRUE(roles->at("bob").admin);
  EXPECT_FALSE(roles->at("carol").admin || roles->at("carol").agent);
  for (const auto& [content, message] : std::vector<std::pair<std::string, std::string>>{
           {"rack-9\n", "r.txt:1: expected \"IDENTITY ROLE\""},
           {"rack-9 agnet\n", "r.txt:1: role must be"},
           {"bob admin\nbob user\n", "r.txt:2: bob is listed twice"}}) {
    auto bad = ParseCertRoles(content, "r.txt");
    ASSERT_FALSE(bad.ok()) << content;
    EXPECT_NE(bad.status().message().find("client_cert_roles: " + message), std::string::npos)
        << bad.status();
  }
}

}  // namespace
}  // namespace ampd::server
