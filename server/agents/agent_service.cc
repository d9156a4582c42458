#include "server/agents/agent_service.h"

#include <chrono>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/dist/process_group.h"
#include "engine/io/sha256.h"
#include "server/jobs/job_runner.h"
#include "server/jobs/run_outputs.h"
#include "server/log.h"
#include "server/rpc_status.h"

namespace ampd::server::agents {
namespace {

namespace v1 = ::ampd::v1;

grpc::Status FromAbsl(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// Job ids and store keys become file names under the data root: letters,
// digits, '-', '_', '.', and '/' between non-empty parts, never "..".
bool SafeName(const std::string& s, bool slashes) {
  if (s.empty() || s.size() > 256 || s.find("..") != std::string::npos || s.front() == '/' ||
      s.back() == '/' || s.find("//") != std::string::npos) {
    return false;
  }
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || (slashes && c == '/');
    if (!ok) return false;
  }
  return true;
}

constexpr int64_t kMaxStoreWaitMs = 120000;
constexpr size_t kChunkBytes = 1 << 20;

}  // namespace

grpc::Status AgentServiceImpl::Connect(grpc::ServerContext* ctx, const v1::AgentHello* hello,
                                       grpc::ServerWriter<v1::AgentWork>* writer) {
  Principal who;
  if (grpc::Status a = auth_->CheckAgent(ctx, &who); !a.ok()) return a;
  absl::StatusOr<std::shared_ptr<AgentRegistry::Session>> session =
      registry_->Connect(*hello, who.name);
  if (!session.ok()) return FromAbsl(session.status());
  LogInfo("agent connected", {{"agent", hello->name()},
                              {"principal", who.name},
                              {"slots", std::to_string(hello->slots())}});
  bool closed = false, finished = false;
  while (!ctx->IsCancelled()) {
    std::optional<v1::AgentWork> work =
        registry_->NextWork(**session, std::chrono::milliseconds(200), &closed, &finished);
    if (closed) break;
    if (work && !writer->Write(*work)) break;
  }
  registry_->Disconnect(*session);
  LogInfo("agent disconnected", {{"agent", hello->name()}});
  if (finished) return grpc::Status::OK;  // its job has ended
  return closed ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down")
                : grpc::Status::OK;
}

grpc::Status AgentServiceImpl::ReportWorker(grpc::ServerContext* ctx,
                                            const v1::WorkerReport* report,
                                            google::protobuf::Empty*) {
  Principal who;
  if (grpc::Status a = auth_->CheckAgent(ctx, &who); !a.ok()) return a;
  if (report->lost()) {
    LogWarning("data-parallel worker lost on an agent",
               {{"agent", report->agent()}, {"job", report->job()}, {"reason", report->reason()}});
  }
  return FromAbsl(registry_->Report(*report, who.name));
}

grpc::Status AgentServiceImpl::CheckRuns(const grpc::ServerContext* ctx, const std::string& job,
                                         int64_t attempt, const std::string& key,
                                         Principal* caller) const {
  Principal who;
  if (grpc::Status a = auth_->CheckAgent(ctx, &who); !a.ok()) return a;
  if (!SafeName(job, false)) return InvalidField("job", "not a job id");
  if (!SafeName(key, true)) {
    return InvalidField("key", "letters, digits, - _ . and / between parts, at most 256");
  }
  if (!registry_->Runs(who.name, job, attempt)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("no agent of \"", who.name, "\" runs attempt ", attempt,
                                     " of job ", job, " now"));
  }
  if (caller != nullptr) *caller = std::move(who);
  return grpc::Status::OK;
}

// The job's rendezvous store: the directory its local ranks meet in.
absl::StatusOr<std::shared_ptr<engine::dist::RendezvousStore>> AgentServiceImpl::JobStore(
    const std::string& job) const {
  return engine::dist::FileStore(jobs::WorkersDir(data_root_, job) + "/rendezvous");
}

grpc::Status AgentServiceImpl::StoreSet(grpc::ServerContext* ctx,
                                        const v1::StoreSetRequest* request,
                                        google::protobuf::Empty*) {
  if (grpc::Status s = CheckRuns(ctx, request->job(), request->attempt(), request->key());
      !s.ok()) {
    return s;
  }
  if (request->value().size() > (1 << 20)) return InvalidField("value", "larger than 1 MiB");
  absl::StatusOr<std::shared_ptr<engine::dist::RendezvousStore>> store = JobStore(request->job());
  if (!store.ok()) return FromAbsl(store.status());
  return FromAbsl((*store)->Set(request->key(), request->value()));
}

grpc::Status AgentServiceImpl::StoreGet(grpc::ServerContext* ctx,
                                        const v1::StoreGetRequest* request,
                                        v1::StoreGetResponse* response) {
  if (grpc::Status s = CheckRuns(ctx, request->job(), request->attempt(), request->key());
      !s.ok()) {
    return s;
  }
  if (request->timeout_ms() < 0 || request->timeout_ms() > kMaxStoreWaitMs) {
    return InvalidField("timeout_ms", absl::StrCat("0 to ", kMaxStoreWaitMs));
  }
  absl::StatusOr<std::shared_ptr<engine::dist::RendezvousStore>> store = JobStore(request->job());
  if (!store.ok()) return FromAbsl(store.status());
  absl::StatusOr<std::string> value =
      (*store)->Get(request->key(), std::chrono::milliseconds(request->timeout_ms()));
  if (!value.ok()) return FromAbsl(value.status());
  response->set_value(*std::move(value));
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::FetchCheckpoint(grpc::ServerContext* ctx,
                                               const v1::FetchCheckpointRequest* request,
                                               grpc::ServerWriter<v1::CheckpointChunk>* writer) {
  if (grpc::Status s = CheckRuns(ctx, request->job(), -1, "checkpoint"); !s.ok()) return s;
  const std::string name = absl::StrFormat("step-%08d.safetensors", request->step());
  const std::string path = jobs::CheckpointDir(data_root_, request->job()) + "/" + name;
  std::ifstream in(path, std::ios::binary);
  std::ifstream sidecar(path + ".sha256");
  std::string sha;
  if (!in || !(sidecar >> sha)) {
    return NotFound("checkpoint", absl::StrCat(request->job(), "/", name));
  }
  std::string buffer(kChunkBytes, '\0');
  bool first = true;
  while (true) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "fetch cancelled");
    in.read(buffer.data(), buffer.size());
    const std::streamsize n = in.gcount();
    v1::CheckpointChunk chunk;
    if (first) chunk.set_file_name(name);
    first = false;
    chunk.set_data(buffer.data(), n);
    if (!in) chunk.set_sha256(sha);
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "agent went away");
    if (!in) break;
  }
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::FetchDataFile(grpc::ServerContext* ctx,
                                             const v1::FetchDataFileRequest* request,
                                             grpc::ServerWriter<v1::DataFileChunk>* writer) {
  Principal who;
  if (grpc::Status s = CheckRuns(ctx, request->job(), -1, "data", &who); !s.ok()) return s;
  // Only a path the job's spec names, where the server resolved it for the
  // job's owner: an agent cannot read anything else through this.
  const std::optional<std::string> path =
      registry_->DataFilePath(who.name, request->job(), request->path());
  if (!path) {
    return NotFound("data file", absl::StrCat(request->job(), ": ", request->path()));
  }
  std::ifstream in(*path, std::ios::binary);
  if (!in) return NotFound("data file", request->path());
  engine::io::Sha256 sha;
  std::string buffer(kChunkBytes, '\0');
  while (true) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "fetch cancelled");
    in.read(buffer.data(), buffer.size());
    const std::streamsize n = in.gcount();
    if (in.bad()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("reading ", request->path(), " failed"));
    }
    v1::DataFileChunk chunk;
    chunk.set_data(buffer.data(), n);
    sha.Update(buffer.data(), static_cast<size_t>(n));
    if (!in) chunk.set_sha256(sha.FinishHex());
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "agent went away");
    if (!in) break;
  }
  return grpc::Status::OK;
}

}  // namespace ampd::server::agents
