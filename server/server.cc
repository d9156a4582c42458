#include "server/server.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/log.h"

namespace ampd::server {

AmpdServer::AmpdServer(ServerOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<AmpdServer>> AmpdServer::Start(ServerOptions options) {
  std::unique_ptr<AmpdServer> s(new AmpdServer(std::move(options)));
  const std::string db_path = s->options_.jobs.data_root + "/ampd.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(db_path);
  if (!store.ok()) return store.status();
  s->store_ = *std::move(store);
  s->profiles_ = std::make_unique<ProfileStore>(s->store_.get());
  JobManagerOptions jobs = s->options_.jobs;
  jobs.store = s->store_.get();
  ProfileStore* profiles = s->profiles_.get();
  jobs.profiles = [profiles](const std::string& name) -> std::optional<ampd::v1::PrecisionConfig> {
    auto p = profiles->Get(name);
    if (!p) return std::nullopt;
    return p->config();
  };
  s->jobs_ = std::make_unique<JobManager>(jobs);
  s->training_ = std::make_unique<TrainingServiceImpl>(s->jobs_.get());
  s->precision_ = std::make_unique<PrecisionServiceImpl>(s->profiles_.get());
  s->artifacts_ = std::make_unique<ArtifactServiceImpl>(s->jobs_.get(), s->options_.jobs.data_root,
                                                        s->options_.max_upload_bytes);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(s->options_.listen, grpc::InsecureServerCredentials(), &s->port_);
  builder.SetMaxReceiveMessageSize(s->options_.max_message_bytes);
  builder.SetMaxSendMessageSize(s->options_.max_message_bytes);
  builder.RegisterService(s->training_.get());
  builder.RegisterService(s->precision_.get());
  builder.RegisterService(s->artifacts_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    s->jobs_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("listen: cannot listen on ", s->options_.listen, " (address in use or invalid)"));
  }
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  AmpdServer* self = s.get();
  s->heartbeat_ = std::thread([self] {
    std::unique_lock<std::mutex> lock(self->mu_);
    while (!self->stopping_) {
      self->cv_.wait_for(lock, std::chrono::milliseconds(self->options_.heartbeat_interval_ms));
      if (self->stopping_) break;
      lock.unlock();
      self->jobs_->SendHeartbeats();
      lock.lock();
    }
  });
  LogInfo("listening", {{"address", s->options_.listen}, {"port", std::to_string(s->port_)},
                        {"data_dir", s->options_.jobs.data_root}});
  return s;
}

AmpdServer::~AmpdServer() { Shutdown(); }

void AmpdServer::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  LogInfo("shutting down: health NOT_SERVING, no new jobs, stopping running jobs");
  if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  jobs_->Shutdown();
  if (heartbeat_.joinable()) heartbeat_.join();
  LogInfo("jobs stopped; closing connections");
  if (server_) {
    // Every job has ended, so every stream ends once its client has read the
    // rest of its history; wait for that (bounded by the grace period), then
    // stop. Waiting on open streams rather than on gRPC's deadline matters:
    // gRPC 1.51 holds Shutdown() until the deadline while idle client
    // connections stay open.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.shutdown_grace_ms);
    while (TrainingServiceImpl::open_streams() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (TrainingServiceImpl::open_streams() > 0) {
      LogWarning("closing streams whose clients did not finish reading",
                 {{"streams", std::to_string(TrainingServiceImpl::open_streams())}});
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  }
  LogInfo("stopped");
}

void AmpdServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace ampd::server
