#ifndef AMPD_CLIENT_CLI_H_
#define AMPD_CLIENT_CLI_H_

// Shared pieces of ampctl: options, output, and error reporting.

#include <memory>
#include <string>
#include <vector>

#include "ampd/v1/artifact_service.grpc.pb.h"
#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace ampd::client {

// Exit codes: 0 success (a watched job SUCCEEDED), 1 the job FAILED,
// 2 usage or request error, 3 the job was CANCELLED, 4 server unreachable.
inline constexpr int kExitOk = 0;
inline constexpr int kExitJobFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitJobCancelled = 3;
inline constexpr int kExitUnreachable = 4;

enum class OutputFormat { kTable, kJson };

struct GlobalOptions {
  std::string server;  // --server, else $AMPD_SERVER, else localhost:50051
  OutputFormat output = OutputFormat::kTable;
  double timeout_s = 30;  // unary RPC deadline
  std::string token;      // --token, else $AMPD_TOKEN: sent as "authorization: Bearer ..."
  std::string tls_ca;     // --tls_ca, else $AMPD_TLS_CA: PEM CA of the server; enables TLS
  std::string tls_cert;   // --tls_cert, else $AMPD_TLS_CERT: client certificate (mTLS)
  std::string tls_key;    // --tls_key, else $AMPD_TLS_KEY
};

struct Context {
  GlobalOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<ampd::v1::TrainingService::Stub> training;
  std::unique_ptr<ampd::v1::PrecisionService::Stub> precision;
  std::unique_ptr<ampd::v1::ArtifactService::Stub> artifacts;
  // Sets the unary deadline and adds the credentials (Authorize).
  void SetDeadline(grpc::ClientContext* ctx) const;
  // Adds the bearer token, if any; for calls without a deadline.
  void Authorize(grpc::ClientContext* ctx) const;
};

// "INVALID_ARGUMENT: ..." plus one line per field violation / resource;
// unreachable servers get a hint. Returns the exit code to use.
int ReportRpcError(const Context& ctx, const std::string& what, const grpc::Status& status);

// One unary call with the deadline and credentials: kExitOk, or the error
// reported (ReportRpcError, as "WHAT: CODE: ...") and its exit code.
template <typename Stub, typename Request, typename Response>
int CallUnary(const Context& ctx, const std::string& what, Stub* stub,
              grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
              const Request& request, Response* response) {
  grpc::ClientContext call;
  ctx.SetDeadline(&call);
  const grpc::Status status = (stub->*method)(&call, request, response);
  return status.ok() ? kExitOk : ReportRpcError(ctx, what, status);
}

// Proto3 JSON of a message, pretty or single-line.
std::string ToJson(const google::protobuf::Message& m, bool pretty = true);
// Reads a job spec file (proto3 JSON of ampd.v1.JobSpec). On error returns
// false and sets `error` to "FILE: what is wrong".
bool ReadJsonFile(const std::string& path, google::protobuf::Message* message, std::string* error);

std::string StateName(ampd::v1::JobState state);
// A language model's eval: it scores tokens (val loss, bits per byte) and has
// no accuracy.
inline bool IsLanguageModelEval(const ampd::v1::EvalRecord& e) { return e.tokens() > 0; }
std::string FormatDuration(double seconds);

// Plaintext, or TLS (with a client certificate for mTLS) per the options. On
// error (an unreadable file) returns null and sets `error`.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const GlobalOptions& options,
                                                                 std::string* error);

}  // namespace ampd::client

#endif  // AMPD_CLIENT_CLI_H_
