#include "server/artifact_service.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/io/atomic_file.h"
#include "engine/io/sha256.h"
#include "server/log.h"
#include "server/rpc_status.h"
#include "server/uploads.h"

namespace ampd::server {

namespace fs = std::filesystem;
namespace v1 = ::ampd::v1;

namespace {

constexpr size_t kChunkBytes = 256 * 1024;

// A relative path of ordinary names: no "..", no absolute path, no empty or
// "." components, nothing but [A-Za-z0-9._-/].
bool SafeRelative(const std::string& p) {
  if (p.empty() || p.size() > 512 || p[0] == '/') return false;
  std::stringstream ss(p);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  for (char c : p) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/')) {
      return false;
    }
  }
  return p.back() != '/';
}

}  // namespace

grpc::Status ArtifactServiceImpl::ListArtifacts(grpc::ServerContext* ctx,
                                                const v1::ListArtifactsRequest* request,
                                                v1::ListArtifactsResponse* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return a;
  absl::StatusOr<v1::Job> job = jobs_->Get(request->job());
  if (!job.ok() || !who.CanSee(job->owner())) return NotFound("job", request->job());
  std::error_code ec;
  const std::string weights = data_root_ + "/jobs/" + job->id() + "/model.safetensors";
  if (fs::exists(weights, ec)) {
    v1::Artifact* a = response->add_artifacts();
    a->set_name("model.safetensors");
    a->set_size_bytes(static_cast<int64_t>(fs::file_size(weights, ec)));
  }
  std::vector<std::string> checkpoints;
  for (const auto& e : fs::directory_iterator(data_root_ + "/checkpoints/" + job->id(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) {
      checkpoints.push_back(name);
    }
  }
  std::sort(checkpoints.begin(), checkpoints.end());
  for (const std::string& name : checkpoints) {
    v1::Artifact* a = response->add_artifacts();
    a->set_name("checkpoints/" + name);
    a->set_size_bytes(static_cast<int64_t>(
        fs::file_size(data_root_ + "/checkpoints/" + job->id() + "/" + name, ec)));
  }
  return grpc::Status::OK;
}

grpc::Status ArtifactServiceImpl::DownloadArtifact(grpc::ServerContext* ctx,
                                                   const v1::DownloadArtifactRequest* request,
                                                   grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return a;
  absl::StatusOr<v1::Job> job = jobs_->Get(request->job());
  if (!job.ok() || !who.CanSee(job->owner())) return NotFound("job", request->job());
  const std::string artifact =
      request->artifact().empty() ? "model.safetensors" : request->artifact();
  std::string path;
  if (artifact == "model.safetensors") {
    path = data_root_ + "/jobs/" + job->id() + "/model.safetensors";
  } else if (artifact.rfind("checkpoints/", 0) == 0 && SafeRelative(artifact) &&
             artifact.find('/', 12) == std::string::npos) {
    path = data_root_ + "/checkpoints/" + job->id() + "/" + artifact.substr(12);
  } else {
    return InvalidField(
        "artifact", "expected \"model.safetensors\" or \"checkpoints/NAME\" (see ListArtifacts)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("artifact", job->name() + "/" + artifact);
  std::error_code ec;
  const int64_t total = static_cast<int64_t>(fs::file_size(path, ec));
  engine::io::Sha256 sha;
  std::string buffer(kChunkBytes, '\0');
  int64_t offset = 0;
  while (true) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "download cancelled");
    in.read(buffer.data(), buffer.size());
    const std::streamsize n = in.gcount();
    v1::ArtifactChunk chunk;
    chunk.set_data(buffer.data(), n);
    chunk.set_offset(offset);
    chunk.set_total_bytes(total);
    sha.Update(buffer.data(), n);
    offset += n;
    const bool last = !in || offset >= total;
    if (last) chunk.set_sha256(sha.FinishHex());
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    if (last) break;
  }
  return grpc::Status::OK;
}

grpc::Status ArtifactServiceImpl::UploadDataset(
    grpc::ServerContext* ctx, grpc::ServerReader<v1::UploadDatasetRequest>* reader,
    v1::UploadedDataset* response) {
  Principal who;
  if (grpc::Status a = auth_->Check(ctx, &who); !a.ok()) return a;
  v1::UploadDatasetRequest message;
  if (!reader->Read(&message) || !message.has_header()) {
    return InvalidField("header", "the first message must carry the upload header");
  }
  const v1::UploadHeader header = message.header();
  std::vector<engine::runner::FieldViolation> violations;
  if (!SafeRelative(header.path())) {
    violations.push_back(
        {"header.path", "must be a relative path of plain names ([A-Za-z0-9._-], no \"..\")"});
  }
  if (header.size_bytes() < 0) violations.push_back({"header.size_bytes", "must be >= 0"});
  if (header.sha256().size() != 64)
    violations.push_back({"header.sha256", "must be 64 hex characters"});
  if (!violations.empty()) {
    LogWarning("upload refused", {{"path", header.path()}});
    return InvalidArgument(violations);
  }
  if (header.size_bytes() > max_upload_bytes_) {
    return ResourceExhausted("max_upload_bytes",
                             absl::StrCat("the file has ", header.size_bytes(),
                                          " bytes; the limit is ", max_upload_bytes_));
  }
  const int64_t used = UploadBytesUsed(data_root_, who.name);
  if (used + header.size_bytes() > upload_quota_bytes_) {
    return ResourceExhausted(
        "upload_quota_bytes_per_principal",
        absl::StrCat("your uploads use ", used, " bytes; this one (", header.size_bytes(),
                     " bytes) would pass the quota of ", upload_quota_bytes_));
  }
  // Each principal's uploads live in its own directory; job specs still say
  // "uploads/PATH" (resolved in the job owner's directory).
  const std::string relative = "uploads/" + header.path();
  const std::string path = UploadDir(data_root_, who.name) + "/" + header.path();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  absl::StatusOr<std::unique_ptr<engine::io::AtomicFileWriter>> out =
      engine::io::AtomicFileWriter::Create(path);
  if (!out.ok()) return ToGrpc(out.status());
  int64_t received = 0;
  engine::io::Sha256 sha;
  while (reader->Read(&message)) {
    if (!message.has_chunk() && message.has_header()) {
      (*out)->Abort();
      return InvalidField("header", "sent twice");
    }
    received += static_cast<int64_t>(message.chunk().size());
    if (received > header.size_bytes()) {
      (*out)->Abort();
      return InvalidField(
          "header.size_bytes",
          absl::StrCat("the upload sent more than the declared ", header.size_bytes(), " bytes"));
    }
    sha.Update(message.chunk());
    if (absl::Status s = (*out)->Append(message.chunk().data(), message.chunk().size()); !s.ok()) {
      (*out)->Abort();
      return ToGrpc(s);
    }
  }
  if (received != header.size_bytes()) {
    (*out)->Abort();
    return InvalidField("header.size_bytes", absl::StrCat("declared ", header.size_bytes(),
                                                          " bytes but received ", received));
  }
  // The checksum is checked before the file becomes visible; Commit renames.
  const std::string tmp_sha = sha.FinishHex();
  if (tmp_sha != header.sha256()) {
    (*out)->Abort();
    return grpc::Status(grpc::StatusCode::DATA_LOSS,
                        absl::StrCat("header.sha256: the data received hashes to ", tmp_sha,
                                     ", not ", header.sha256(), "; nothing was stored"));
  }
  if (absl::Status s = (*out)->Commit(); !s.ok()) return ToGrpc(s);
  response->set_path(relative);
  response->set_size_bytes(received);
  response->set_sha256(tmp_sha);
  LogInfo("dataset uploaded", {{"path", relative}, {"bytes", std::to_string(received)}});
  return grpc::Status::OK;
}

}  // namespace ampd::server
