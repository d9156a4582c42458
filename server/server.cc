#include "server/server.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/cpu/bf16_gemm_route.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/flag_file.h"
#include "server/log.h"

namespace ampd::server {

namespace {

// TLS or plaintext credentials for the listening port, per the options.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(const ServerOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (o.tls_cert.empty()) {
    if (!o.tls_client_ca.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    if (!IsLoopbackAddress(o.listen)) {
      if (!o.insecure) {
        return absl::FailedPreconditionError(absl::StrCat(
            "refusing to listen on non-loopback address ", o.listen,
            " without TLS: pass --tls_cert and --tls_key, or --insecure to allow plaintext"));
      }
      LogWarning(
          "listening WITHOUT TLS on a non-loopback address (--insecure): traffic and "
          "tokens are readable by anyone on the network",
          {{"address", o.listen}});
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  absl::StatusOr<std::string> cert = ReadFlagFile("tls_cert", o.tls_cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFlagFile("tls_key", o.tls_key);
  if (!key.ok()) return key.status();
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!o.tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFlagFile("tls_client_ca", o.tls_client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

bool IsLoopbackAddress(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0) return true;
  std::string host;
  if (!listen.empty() && listen.front() == '[') {
    const size_t close = listen.find(']');
    if (close == std::string::npos) return false;
    host = listen.substr(1, close - 1);
  } else {
    const size_t colon = listen.rfind(':');
    host = colon == std::string::npos ? listen : listen.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

AmpdServer::AmpdServer(ServerOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<AmpdServer>> AmpdServer::Start(ServerOptions options) {
  // Jobs may ask for CUDA; without a usable GPU they get FAILED_PRECONDITION.
  std::unique_ptr<AmpdServer> s(new AmpdServer(std::move(options)));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeCredentials(s->options_);
  if (!credentials.ok()) return credentials.status();
  if (!s->options_.client_cert_roles.empty() &&
      (s->options_.tls_client_ca.empty() || !s->options_.tokens_file.empty())) {
    return absl::InvalidArgumentError(
        "--client_cert_roles needs --tls_client_ca and no --tokens_file (with a tokens file, "
        "the tokens' lines give the roles)");
  }
  if (!s->options_.tokens_file.empty()) {
    absl::StatusOr<Authenticator> auth = Authenticator::FromTokensFile(s->options_.tokens_file);
    if (!auth.ok()) return auth.status();
    s->auth_ = *std::move(auth);
  } else if (!s->options_.tls_client_ca.empty()) {
    absl::StatusOr<Authenticator> auth =
        Authenticator::FromClientCertificates(s->options_.client_cert_roles);
    if (!auth.ok()) return auth.status();
    s->auth_ = *std::move(auth);
  }
  const std::string db_path = s->options_.jobs.data_root + "/ampd.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = OpenSqliteJobStore(db_path);
  if (!store.ok()) return store.status();
  s->store_ = *std::move(store);
  s->profiles_ = std::make_unique<ProfileStore>(s->store_.get());
  if (!s->options_.metrics_listen.empty() && !IsLoopbackAddress(s->options_.metrics_listen) &&
      !s->options_.insecure) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen=", s->options_.metrics_listen,
                     " is not a loopback address and the metrics endpoint has no "
                     "authentication; pass --insecure to serve it anyway"));
  }
  s->metrics_ = std::make_unique<ServerMetrics>();
  JobManagerOptions jobs = s->options_.jobs;
  jobs.store = s->store_.get();
  ServerMetrics* metrics = s->metrics_.get();
  jobs.on_checkpoint = [metrics](double seconds, int64_t bytes) {
    metrics->ObserveCheckpointWrite(seconds, bytes);
  };
  ProfileStore* profiles = s->profiles_.get();
  jobs.profiles = [profiles](const std::string& name, const std::optional<std::string>& owner)
      -> std::optional<ampd::v1::PrecisionConfig> {
    auto p = profiles->Get(name);
    if (!p || (owner && p->owner() != *owner)) return std::nullopt;
    return p->config();
  };
  s->agents_ = std::make_unique<agents::AgentRegistry>();
  jobs.agents = s->agents_.get();
  s->jobs_ = std::make_unique<JobManager>(jobs);
  s->training_ = std::make_unique<TrainingServiceImpl>(s->jobs_.get(), &s->auth_,
                                                       s->options_.max_streams_per_principal,
                                                       s->options_.max_generations);
  JobManager* manager = s->jobs_.get();
  agents::AgentRegistry* registry = s->agents_.get();
  s->precision_ =
      std::make_unique<PrecisionServiceImpl>(s->profiles_.get(), &s->auth_, [manager, registry] {
        ampd::v1::WorkerSlots local;
        local.set_host("local");
        local.set_device_kind("cpu");
        const auto [slots, free] = manager->WorkerSlots();
        local.set_slots(slots);
        local.set_free(free);
        std::vector<ampd::v1::WorkerSlots> all = {local};
        for (ampd::v1::WorkerSlots& a : registry->Slots()) all.push_back(std::move(a));
        return all;
      });
  s->artifacts_ = std::make_unique<ArtifactServiceImpl>(
      s->jobs_.get(), s->options_.jobs.data_root, s->options_.max_upload_bytes, &s->auth_,
      s->options_.upload_quota_bytes_per_principal);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(s->options_.listen, *credentials, &s->port_);
  builder.SetMaxReceiveMessageSize(s->options_.max_message_bytes);
  builder.SetMaxSendMessageSize(s->options_.max_message_bytes);
  builder.RegisterService(s->training_.get());
  builder.RegisterService(s->precision_.get());
  builder.RegisterService(s->artifacts_.get());
  s->agent_service_ = std::make_unique<agents::AgentServiceImpl>(
      s->agents_.get(), s->options_.jobs.data_root, &s->auth_);
  builder.RegisterService(s->agent_service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(s->metrics_->RpcInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // MFU's denominator on the host, measured once now (about 0.1 s) rather
  // than inside the first job's first step.
  double cpu_peak = 0;
  if (absl::StatusOr<engine::backend::Backend*> cpu =
          engine::backend::BackendFor(engine::Device::kCpu);
      cpu.ok()) {
    cpu_peak = (*cpu)->PeakFlops();
  }
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    s->jobs_->Shutdown();
    return absl::UnavailableError(absl::StrCat("listen: cannot listen on ", s->options_.listen,
                                               " (address in use or invalid)"));
  }
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->metrics_->jobs = [manager] { return manager->MetricsSnapshot(); };
  s->metrics_->open_streams = [] { return TrainingServiceImpl::open_streams(); };
  s->metrics_->event_serializations = [] { return JobManager::EventSerializations(); };
  if (!s->options_.metrics_listen.empty()) {
    absl::StatusOr<int> port = s->metrics_->Serve(s->options_.metrics_listen);
    if (port.ok()) {
      s->metrics_port_ = *port;
    } else if (s->options_.metrics_required) {
      s->Shutdown();
      return port.status();
    } else {
      LogWarning("serving no metrics", {{"error", std::string(port.status().message())}});
    }
  }
  AmpdServer* self = s.get();
  s->heartbeat_ = std::thread([self] {
    std::unique_lock<std::mutex> lock(self->mu_);
    while (!self->stopping_) {
      self->cv_.wait_for(lock, std::chrono::milliseconds(self->options_.heartbeat_interval_ms));
      if (self->stopping_) break;
      lock.unlock();
      self->jobs_->SendHeartbeats();
      // Ended jobs age out even when no job ends to trigger it.
      if (self->jobs_->RetentionEnabled()) self->jobs_->ApplyRetention();
      lock.lock();
    }
  });
  LogInfo("listening", {{"address", s->options_.listen},
                        {"cpu_bf16_gflops", absl::StrFormat("%.1f", cpu_peak / 1e9)},
                        {"cpu_bf16_gemms",
                         engine::cpu::Bf16GemmRouteName(engine::cpu::ChosenBf16GemmRoute().route)},
                        {"port", std::to_string(s->port_)},
                        {"metrics_port", std::to_string(s->metrics_port_)},
                        {"data_dir", s->options_.jobs.data_root},
                        {"tls", s->options_.tls_cert.empty()        ? "off"
                                : s->options_.tls_client_ca.empty() ? "on"
                                                                    : "mtls"},
                        {"auth", !s->options_.tokens_file.empty()     ? "tokens"
                                 : !s->options_.tls_client_ca.empty() ? "client-certificate"
                                                                      : "none"}});
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
  if (metrics_) metrics_->StopServing();  // its scrapes read the job manager
  if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  if (jobs_) jobs_->Shutdown();
  // After the jobs (their agents' ranks were told to stop): agents' sessions
  // end, and the agents connect again to whichever server comes up.
  if (agents_) agents_->Close();
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
