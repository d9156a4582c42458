#include "server/auth.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/io/sha256.h"

namespace ampd::server {

absl::StatusOr<Authenticator> Authenticator::FromTokensFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("tokens_file: cannot read ", path));
  Authenticator auth;
  auth.mode_ = Mode::kTokens;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (parts.empty()) continue;
    const std::string where = absl::StrCat("tokens_file: ", path, ":", line_number, ": ");
    if (parts.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected \"SHA256HEX PRINCIPAL ROLE\""));
    }
    std::string digest = absl::AsciiStrToLower(parts[0]);
    if (digest.size() != 64 || digest.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the first field must be the token's SHA-256 (64 hex characters)"));
    }
    if (parts[2] != "user" && parts[2] != "admin" && parts[2] != "agent") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "role must be \"user\", \"admin\" or \"agent\""));
    }
    auth.tokens_[digest] = Principal{parts[1], parts[2] == "admin", parts[2] == "agent"};
  }
  return auth;
}

Authenticator Authenticator::FromClientCertificates() {
  Authenticator auth;
  auth.mode_ = Mode::kClientCert;
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
            return Principal{std::string(values.front().data(), values.front().size()), false};
          }
        }
        std::vector<grpc::string_ref> ids = auth->GetPeerIdentity();
        if (!ids.empty())
          return Principal{std::string(ids.front().data(), ids.front().size()), false};
      }
      return absl::UnauthenticatedError("no verified client certificate");
    }
  }
  return absl::UnauthenticatedError("unauthenticated");
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
                        absl::StrCat("\"", p->name, "\" is not an agent (tokens file role agent)"));
  }
  *principal = *std::move(p);
  return grpc::Status::OK;
}

}  // namespace ampd::server
