#ifndef AMPD_SERVER_AUTH_H_
#define AMPD_SERVER_AUTH_H_

// Who is calling. Three modes, chosen at startup:
//   tokens file: "authorization: Bearer TOKEN" is hashed (SHA-256) and looked
//     up; the line names the principal and its role (user|admin|agent);
//   mTLS (a client CA, no tokens file): the verified client certificate's
//     identity (its CN, else its first SAN) is the principal, a user unless
//     a roles file ("IDENTITY ROLE" lines) makes it an admin or an agent;
//   neither: every caller is "local", an admin (single-user, as before).

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/principal_files.h"

namespace ampd::server {

class Authenticator {
 public:
  // No authentication: everyone is "local", an admin.
  Authenticator() = default;
  // Reads a tokens file (principal_files.h).
  static absl::StatusOr<Authenticator> FromTokensFile(const std::string& path);
  // Certificate identities are users, except those a roles file (lines
  // "IDENTITY ROLE", '#' comments; "" = none) names admin or agent.
  static absl::StatusOr<Authenticator> FromClientCertificates(const std::string& roles_file = "");

  // The caller, or UNAUTHENTICATED.
  absl::StatusOr<Principal> Authenticate(const grpc::ServerContextBase* ctx) const;
  // Authenticate() as a grpc::Status; fills *principal on success. Agents
  // are PERMISSION_DENIED here: the client services are not theirs.
  grpc::Status Check(const grpc::ServerContextBase* ctx, Principal* principal) const;
  // For AgentService: an agent or an admin; users are PERMISSION_DENIED.
  grpc::Status CheckAgent(const grpc::ServerContextBase* ctx, Principal* principal) const;

 private:
  // A certificate identity with its role from the roles file.
  Principal CertPrincipal(const std::string& identity) const;

  enum class Mode { kNone, kTokens, kClientCert };
  Mode mode_ = Mode::kNone;
  std::map<std::string, Principal> tokens_;      // sha256 hex -> principal
  std::map<std::string, Principal> cert_roles_;  // certificate identity -> principal
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_AUTH_H_
