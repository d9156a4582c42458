#ifndef AMPD_SERVER_SERVER_H_
#define AMPD_SERVER_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/agents/agent_registry.h"
#include "server/agents/agent_service.h"
#include "server/artifact_service.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "server/metrics.h"
#include "server/precision_service.h"
#include "server/profile_store.h"
#include "server/training_service.h"

namespace ampd::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";  // port 0: pick a free port
  JobManagerOptions jobs;
  int heartbeat_interval_ms = 2000;
  int shutdown_grace_ms = 5000;
  int max_message_bytes = 16 << 20;
  int64_t max_upload_bytes = 1LL << 30;
  int64_t upload_quota_bytes_per_principal = 10LL << 30;
  int max_streams_per_principal = 10000;
  int max_generations = 2;  // Generate calls at once
  // Transport security (PEM file paths). With tls_cert and tls_key the port
  // speaks TLS; with tls_client_ca too, clients must present a certificate
  // signed by that CA (mTLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // With tls_client_ca and no tokens file: "IDENTITY ROLE" lines that make
  // certificate identities admins or agents (others are users).
  std::string client_cert_roles;
  // Allows plaintext on a non-loopback address (refused otherwise).
  bool insecure = false;
  // "SHA256HEX PRINCIPAL ROLE" lines; every RPC then needs a bearer token.
  std::string tokens_file;
  // Prometheus metrics at http://metrics_listen/metrics ("": none). A
  // non-loopback address needs `insecure` (the endpoint has no auth). When
  // the address cannot be bound, Start fails if metrics_required, else it
  // logs a warning and serves no metrics (the default port may be taken by
  // another ampd).
  std::string metrics_listen;
  bool metrics_required = true;
};

// Whether `listen` (HOST:PORT) is a loopback address.
bool IsLoopbackAddress(const std::string& listen);

// The ampd server: TrainingService, PrecisionService, grpc.health.v1.Health
// and server reflection on one port.
class AmpdServer {
 public:
  static absl::StatusOr<std::unique_ptr<AmpdServer>> Start(ServerOptions options);
  ~AmpdServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }  // 0: not serving metrics
  // Graceful: health NOT_SERVING, no new jobs, running jobs stopped, streams
  // end with their job's final state, then the server stops. Idempotent.
  void Shutdown();
  void Wait();

 private:
  explicit AmpdServer(ServerOptions options);

  ServerOptions options_;
  // Before everything it observes: destroyed last.
  std::unique_ptr<ServerMetrics> metrics_;
  int metrics_port_ = 0;
  Authenticator auth_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<ProfileStore> profiles_;
  // Before the job manager, which places ranks on its agents.
  std::unique_ptr<agents::AgentRegistry> agents_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TrainingServiceImpl> training_;
  std::unique_ptr<PrecisionServiceImpl> precision_;
  std::unique_ptr<ArtifactServiceImpl> artifacts_;
  std::unique_ptr<agents::AgentServiceImpl> agent_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread heartbeat_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_SERVER_H_
