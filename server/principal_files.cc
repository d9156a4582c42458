#include "server/principal_files.h"

#include <functional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/flag_file.h"

namespace ampd::server {
namespace {

// "user", "admin" or "agent" as a principal's flags.
bool ParseRole(const std::string& role, Principal* p) {
  if (role != "user" && role != "admin" && role != "agent") return false;
  p->admin = role == "admin";
  p->agent = role == "agent";
  return true;
}

// fn(fields, "FLAG: PATH:LINE: ") for each line of whitespace-separated
// fields with '#' comments (blank lines skipped); the first error stops it.
absl::Status ForEachLine(
    const std::string& content, const std::string& flag, const std::string& path,
    const std::function<absl::Status(const std::vector<std::string>&, const std::string&)>& fn) {
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(content, '\n')) {
    ++line_number;
    std::string line(raw);
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

absl::Status BadRole(const std::string& where) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, "role must be \"user\", \"admin\" or \"agent\""));
}

}  // namespace

absl::StatusOr<std::map<std::string, Principal>> ParseTokens(const std::string& content,
                                                             const std::string& path) {
  std::map<std::string, Principal> tokens;
  absl::Status s =
      ForEachLine(content, "tokens_file", path,
                  [&](const std::vector<std::string>& parts, const std::string& where) {
                    if (parts.size() != 3) {
                      return absl::InvalidArgumentError(
                          absl::StrCat(where, "expected \"SHA256HEX PRINCIPAL ROLE\""));
                    }
                    std::string digest = absl::AsciiStrToLower(parts[0]);
                    if (digest.size() != 64 ||
                        digest.find_first_not_of("0123456789abcdef") != std::string::npos) {
                      return absl::InvalidArgumentError(
                          absl::StrCat(where,
                                       "the first field must be the token's SHA-256 (64 hex "
                                       "characters)"));
                    }
                    Principal p{parts[1]};
                    if (!ParseRole(parts[2], &p)) return BadRole(where);
                    tokens[digest] = std::move(p);
                    return absl::OkStatus();
                  });
  if (!s.ok()) return s;
  return tokens;
}

absl::StatusOr<std::map<std::string, Principal>> ParseCertRoles(const std::string& content,
                                                                const std::string& path) {
  std::map<std::string, Principal> roles;
  absl::Status s = ForEachLine(
      content, "client_cert_roles", path,
      [&](const std::vector<std::string>& parts, const std::string& where) {
        if (parts.size() != 2) {
          return absl::InvalidArgumentError(absl::StrCat(where, "expected \"IDENTITY ROLE\""));
        }
        Principal p{parts[0]};
        if (!ParseRole(parts[1], &p)) return BadRole(where);
        if (!roles.emplace(parts[0], p).second) {
          return absl::InvalidArgumentError(absl::StrCat(where, parts[0], " is listed twice"));
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return roles;
}

absl::StatusOr<std::map<std::string, Principal>> ReadTokensFile(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFlagFile("tokens_file", path);
  if (!content.ok()) return content.status();
  return ParseTokens(*content, path);
}

absl::StatusOr<std::map<std::string, Principal>> ReadCertRolesFile(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFlagFile("client_cert_roles", path);
  if (!content.ok()) return content.status();
  return ParseCertRoles(*content, path);
}

}  // namespace ampd::server
