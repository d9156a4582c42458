#include "client/cli.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/status/statusor.h"
#include "engine/runner/spec_json.h"
#include "google/protobuf/util/json_util.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace ampd::client {

void Context::Authorize(grpc::ClientContext* ctx) const {
  if (!options.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options.token);
}

namespace {

bool ReadFile(const std::string& flag, const std::string& path, std::string* out,
              std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "--" + flag + ": cannot read " + path;
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const GlobalOptions& options,
                                                                 std::string* error) {
  if (options.tls_ca.empty() && options.tls_cert.empty() && options.tls_key.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    *error = "--tls_cert and --tls_key must be given together";
    return nullptr;
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca.empty() && !ReadFile("tls_ca", options.tls_ca, &ssl.pem_root_certs, error)) {
    return nullptr;
  }
  if (!options.tls_cert.empty() &&
      (!ReadFile("tls_cert", options.tls_cert, &ssl.pem_cert_chain, error) ||
       !ReadFile("tls_key", options.tls_key, &ssl.pem_private_key, error))) {
    return nullptr;
  }
  return grpc::SslCredentials(ssl);
}

void Context::SetDeadline(grpc::ClientContext* ctx) const {
  Authorize(ctx);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000)));
}

int ReportRpcError(const Context& ctx, const std::string& what, const grpc::Status& status) {
  const grpc::StatusCode code = status.error_code();
  if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::fprintf(stderr,
                 "ampctl: %s: cannot reach ampd at %s (%s).\n"
                 "  Is the server running? Start it with: bazel run //server:ampd\n"
                 "  or point ampctl elsewhere with --server=HOST:PORT or AMPD_SERVER.\n",
                 what.c_str(), ctx.options.server.c_str(), status.error_message().c_str());
    return kExitUnreachable;
  }
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  const char* name = c >= 0 && c <= 16 ? kNames[c] : "ERROR";
  google::rpc::Status details;
  bool printed_details = false;
  if (details.ParseFromString(status.error_details())) {
    for (const auto& any : details.details()) {
      google::rpc::BadRequest bad;
      google::rpc::ResourceInfo resource;
      google::rpc::QuotaFailure quota;
      google::rpc::PreconditionFailure precondition;
      if (any.UnpackTo(&bad)) {
        std::fprintf(stderr, "ampctl: %s: %s: the request has invalid fields:\n", what.c_str(),
                     name);
        for (const auto& v : bad.field_violations()) {
          std::fprintf(stderr, "  %s: %s\n", v.field().c_str(), v.description().c_str());
        }
        printed_details = true;
      } else if (any.UnpackTo(&resource)) {
        std::fprintf(stderr, "ampctl: %s: %s: %s \"%s\" does not exist\n", what.c_str(), name,
                     resource.resource_type().c_str(), resource.resource_name().c_str());
        printed_details = true;
      } else if (any.UnpackTo(&quota)) {
        std::fprintf(stderr, "ampctl: %s: %s: limit reached:\n", what.c_str(), name);
        for (const auto& v : quota.violations()) {
          std::fprintf(stderr, "  %s: %s\n", v.subject().c_str(), v.description().c_str());
        }
        printed_details = true;
      } else if (any.UnpackTo(&precondition)) {
        std::fprintf(stderr, "ampctl: %s: %s:\n", what.c_str(), name);
        for (const auto& v : precondition.violations()) {
          std::fprintf(stderr, "  %s: %s\n", v.subject().c_str(), v.description().c_str());
        }
        printed_details = true;
      }
    }
  }
  if (!printed_details) {
    std::fprintf(stderr, "ampctl: %s: %s: %s\n", what.c_str(), name,
                 status.error_message().c_str());
  }
  return kExitUsage;
}

std::string ToJson(const google::protobuf::Message& m, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.preserve_proto_field_names = false;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  if (pretty && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool ReadJsonFile(const std::string& path, google::protobuf::Message* message, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open file";
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (auto* spec = dynamic_cast<ampd::v1::JobSpec*>(message)) {
    // Job specs accept the aliases of spec files (engine/runner/spec_json.h).
    absl::StatusOr<ampd::v1::JobSpec> parsed =
        ampd::engine::runner::ParseJobSpecJson(ss.str(), path);
    if (!parsed.ok()) {
      *error = std::string(parsed.status().message());
      return false;
    }
    *spec = *std::move(parsed);
    return true;
  }
  auto status = google::protobuf::util::JsonStringToMessage(ss.str(), message);
  if (!status.ok()) {
    *error = path + ": not a valid " + message->GetDescriptor()->full_name() + ": " +
             std::string(status.message());
    return false;
  }
  return true;
}

std::string StateName(ampd::v1::JobState state) { return ampd::v1::JobState_Name(state); }

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600),
                  (long long)(s / 60 % 60), (long long)(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  }
  return buf;
}

}  // namespace ampd::client
