#ifndef AMPD_SERVER_PRINCIPAL_FILES_H_
#define AMPD_SERVER_PRINCIPAL_FILES_H_

// The files that say who may call the server (auth.h): the tokens file
// (--tokens_file, lines "SHA256HEX PRINCIPAL ROLE") and the client
// certificates' roles (--client_cert_roles, lines "IDENTITY ROLE"). Roles
// are user, admin or agent; '#' starts a comment. Parsing only, no gRPC
// (tests/fuzz/principal_files_fuzzer.cc feeds them arbitrary bytes). Errors
// name the flag, the file and the line.

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace ampd::server {

struct Principal {
  std::string name;
  bool admin = false;
  // An `ampd agent` (lends worker slots: AgentService only).
  bool agent = false;
  // Whether `owner` (a job's or profile's) is visible to this principal.
  bool CanSee(const std::string& owner) const { return admin || owner == name; }
};

// SHA-256 hex of the token (lowercase) -> principal. `path` names the file
// in errors.
absl::StatusOr<std::map<std::string, Principal>> ParseTokens(const std::string& content,
                                                             const std::string& path);
// Certificate identity -> principal; an identity listed twice is an error.
absl::StatusOr<std::map<std::string, Principal>> ParseCertRoles(const std::string& content,
                                                                const std::string& path);

// The same, reading the file (NOT_FOUND naming the flag when it cannot).
absl::StatusOr<std::map<std::string, Principal>> ReadTokensFile(const std::string& path);
absl::StatusOr<std::map<std::string, Principal>> ReadCertRolesFile(const std::string& path);

}  // namespace ampd::server

#endif  // AMPD_SERVER_PRINCIPAL_FILES_H_
