// libFuzzer target: arbitrary bytes as the server's tokens file and as its
// client-certificate roles file (server/principal_files.h), whose parsers
// must refuse what is not well-formed with a message naming the file and
// the line, and accept only what they promise. Build and run with
// tools/fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/principal_files.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string content(reinterpret_cast<const char*>(data), size);
  auto tokens = ampd::server::ParseTokens(content, "fuzz.txt");
  if (tokens.ok()) {
    for (const auto& [digest, p] : *tokens) {
      Check(digest.size() == 64 &&
            digest.find_first_not_of("0123456789abcdef") == std::string::npos);
      Check(!p.name.empty() && !(p.admin && p.agent));
    }
  } else {
    Check(std::string(tokens.status().message()).rfind("tokens_file: fuzz.txt:", 0) == 0);
  }
  auto roles = ampd::server::ParseCertRoles(content, "fuzz.txt");
  if (roles.ok()) {
    for (const auto& [identity, p] : *roles) {
      Check(!identity.empty() && identity == p.name && !(p.admin && p.agent));
    }
  } else {
    Check(std::string(roles.status().message()).rfind("client_cert_roles: fuzz.txt:", 0) == 0);
  }
  return 0;
}
