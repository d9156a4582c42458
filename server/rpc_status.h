#ifndef AMPD_SERVER_RPC_STATUS_H_
#define AMPD_SERVER_RPC_STATUS_H_

// grpc::Status with google.rpc error details (BadRequest, ResourceInfo,
// QuotaFailure), so every client can show which field or resource is at fault.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/runner/job_spec.h"
#include "grpcpp/grpcpp.h"

namespace ampd::server {

// INVALID_ARGUMENT with one BadRequest.FieldViolation per entry; `prefix` is
// prepended to each field ("spec.").
grpc::Status InvalidArgument(const std::vector<engine::runner::FieldViolation>& violations,
                             const std::string& prefix = "");
grpc::Status InvalidField(const std::string& field, const std::string& description);
grpc::Status NotFound(const std::string& resource_type, const std::string& resource_name);
grpc::Status ResourceExhausted(const std::string& subject, const std::string& description);
grpc::Status FailedPrecondition(const std::string& subject, const std::string& description);
// Any other absl::Status, code preserved.
grpc::Status ToGrpc(const absl::Status& status);

// Finishes a callback-API unary call with `status`.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx, const grpc::Status& status);

}  // namespace ampd::server

#endif  // AMPD_SERVER_RPC_STATUS_H_
