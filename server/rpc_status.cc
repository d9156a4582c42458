#include "server/rpc_status.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace ampd::server {
namespace {

template <typename Detail>
grpc::Status WithDetail(grpc::StatusCode code, const std::string& message, const Detail& detail) {
  google::rpc::Status status;
  status.set_code(code);
  status.set_message(message);
  status.add_details()->PackFrom(detail);
  return grpc::Status(code, message, status.SerializeAsString());
}

}  // namespace

grpc::Status InvalidArgument(const std::vector<engine::runner::FieldViolation>& violations,
                             const std::string& prefix) {
  google::rpc::BadRequest bad;
  std::vector<std::string> parts;
  for (const auto& v : violations) {
    auto* fv = bad.add_field_violations();
    fv->set_field(prefix + v.field);
    fv->set_description(v.description);
    parts.push_back(absl::StrCat(prefix, v.field, ": ", v.description));
  }
  return WithDetail(grpc::StatusCode::INVALID_ARGUMENT, absl::StrJoin(parts, "; "), bad);
}

grpc::Status InvalidField(const std::string& field, const std::string& description) {
  return InvalidArgument({{field, description}});
}

grpc::Status NotFound(const std::string& resource_type, const std::string& resource_name) {
  google::rpc::ResourceInfo info;
  info.set_resource_type(resource_type);
  info.set_resource_name(resource_name);
  return WithDetail(grpc::StatusCode::NOT_FOUND,
                    absl::StrCat(resource_type, " \"", resource_name, "\" not found"), info);
}

grpc::Status ResourceExhausted(const std::string& subject, const std::string& description) {
  google::rpc::QuotaFailure quota;
  auto* v = quota.add_violations();
  v->set_subject(subject);
  v->set_description(description);
  return WithDetail(grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StrCat(subject, ": ", description),
                    quota);
}

grpc::Status FailedPrecondition(const std::string& subject, const std::string& description) {
  google::rpc::PreconditionFailure failure;
  auto* v = failure.add_violations();
  v->set_type("PRECONDITION");
  v->set_subject(subject);
  v->set_description(description);
  return WithDetail(grpc::StatusCode::FAILED_PRECONDITION, absl::StrCat(subject, ": ", description),
                    failure);
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                      const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace ampd::server
