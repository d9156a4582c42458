#include "server/auth.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/io/sha256.h"

namespace ampd::server {

absl::StatusOr<Authenticator> Authenticator::FromTokensFile(const std::string& path) {
  absl::StatusOr<std::map<std::string, Principal>> tokens = ReadTokensFile(path);
  if (!tokens.ok()) return tokens.status();
  Authenticator auth;
  auth.mode_ = Mode::kTokens;
  auth.tokens_ = *std::move(tokens);
  return auth;
}

absl::StatusOr<Authenticator> Authenticator::FromClientCertificates(const std::string& roles_file) {
  Authenticator auth;
  auth.mode_ = Mode::kClientCert;
  if (roles_file.empty()) return auth;
  absl::StatusOr<std::map<std::string, Principal>> roles = ReadCertRolesFile(roles_file);
  if (!roles.ok()) return roles.status();
  auth.cert_roles_ = *std::move(roles);
  return auth;
}

absl::StatusOr<Principal> Authenticator::Authenticate(const grpc::ServerContextBase* ctx) const {
  switch (mode_) {
    case Mode::kNone:
      return Principal{"local", true};
    case Mode::kTokens: {
      const auto& md = ctx->client_metadata();
      auto it = md.find("authorization");
      if (it != md.end()) {
        const std::string value(it->second.data(), it->second.size());
        constexpr char kBearer[] = "Bearer ";
        if (absl::StartsWithIgnoreCase(value, kBearer)) {
          engine::io::Sha256 sha;
          sha.Update(value.substr(sizeof(kBearer) - 1));
          auto found = tokens_.find(sha.FinishHex());
          if (found != tokens_.end()) return found->second;
        }
      }
      return absl::UnauthenticatedError("missing or invalid bearer token");
    }
    case Mode::kClientCert: {
      std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
      if (auth && auth->IsPeerAuthenticated()) {
        for (const char* property : {"x509_common_name", "x509_subject_alternative_name"}) {
          std::vector<grpc::string_ref> values = auth->FindPropertyValues(property);
          if (!values.empty() && values.front().size() > 0) {
            return CertPrincipal(std::string(values.front().data(), values.front().size()));
          }
        }
        std::vector<grpc::string_ref> ids = auth->GetPeerIdentity();
        if (!ids.empty()) {
          return CertPrincipal(std::string(ids.front().data(), ids.front().size()));
        }
      }
      return absl::UnauthenticatedError("no verified client certificate");
    }
  }
  return absl::UnauthenticatedError("unauthenticated");
}

Principal Authenticator::CertPrincipal(const std::string& identity) const {
  auto it = cert_roles_.find(identity);
  return it != cert_roles_.end() ? it->second : Principal{identity};
}

grpc::Status Authenticator::Check(const grpc::ServerContextBase* ctx, Principal* principal) const {
  absl::StatusOr<Principal> p = Authenticate(ctx);
  if (!p.ok())
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(p.status().message()));
  if (p->agent) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("\"", p->name, "\" is an agent: it may only lend worker slots"));
  }
  *principal = *std::move(p);
  return grpc::Status::OK;
}

grpc::Status Authenticator::CheckAgent(const grpc::ServerContextBase* ctx,
                                       Principal* principal) const {
  absl::StatusOr<Principal> p = Authenticate(ctx);
  if (!p.ok())
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(p.status().message()));
  if (!p->agent && !p->admin) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("\"", p->name,
                                     "\" is not an agent (role agent in --tokens_file or "
                                     "--client_cert_roles)"));
  }
  *principal = *std::move(p);
  return grpc::Status::OK;
}

}  // namespace ampd::server
