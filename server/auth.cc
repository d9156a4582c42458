#include "server/auth.h"

#include <fstream>
#include <functional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/io/sha256.h"

namespace ampd::server {

namespace {

// "user", "admin" or "agent" as a principal's flags.
bool ParseRole(const std::string& role, Principal* p) {
  if (role != "user" && role != "admin" && role != "agent") return false;
  p->admin = role == "admin";
  p->agent = role == "agent";
  return true;
}

// fn(fields, "FLAG: PATH:LINE: ") for each line of a whitespace-separated
// file with '#' comments (blank lines skipped); the first error stops it.
absl::Status ForEachLine(
    const std::string& flag, const std::string& path,
    const std::function<absl::Status(const std::vector<std::string>&, const std::string&)>& fn) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (parts.empty()) continue;
    if (absl::Status s = fn(parts, absl::StrCat(flag, ": ", path, ":", line_number, ": "));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Authenticator> Authenticator::FromTokensFile(const std::string& path) {
  Authenticator auth;
  auth.mode_ = Mode::kTokens;
  absl::Status read = ForEachLine(
      "tokens_file", path, [&](const std::vector<std::string>& parts, const std::string& where) {
        if (parts.size() != 3) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, "expected \"SHA256HEX PRINCIPAL ROLE\""));
        }
        std::string digest = absl::AsciiStrToLower(parts[0]);
        if (digest.size() != 64 ||
            digest.find_first_not_of("0123456789abcdef") != std::string::npos) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, "the first field must be the token's SHA-256 (64 hex characters)"));
        }
        Principal p{parts[1]};
        if (!ParseRole(parts[2], &p)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, "role must be \"user\", \"admin\" or \"agent\""));
        }
        auth.tokens_[digest] = std::move(p);
        return absl::OkStatus();
      });
  if (!read.ok()) return read;
  return auth;
}

absl::StatusOr<Authenticator> Authenticator::FromClientCertificates(const std::string& roles_file) {
  Authenticator auth;
  auth.mode_ = Mode::kClientCert;
  if (roles_file.empty()) return auth;
  absl::Status read = ForEachLine(
      "client_cert_roles", roles_file,
      [&](const std::vector<std::string>& parts, const std::string& where) {
        Principal p{parts[0]};
        if (parts.size() != 2) {
          return absl::InvalidArgumentError(absl::StrCat(where, "expected \"IDENTITY ROLE\""));
        }
        if (!ParseRole(parts[1], &p)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, "role must be \"user\", \"admin\" or \"agent\""));
        }
        if (!auth.cert_roles_.emplace(parts[0], p).second) {
          return absl::InvalidArgumentError(absl::StrCat(where, parts[0], " is listed twice"));
        }
        return absl::OkStatus();
      });
  if (!read.ok()) return read;
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
