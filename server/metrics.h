#ifndef AMPD_SERVER_METRICS_H_
#define AMPD_SERVER_METRICS_H_

// Prometheus metrics (prometheus-cpp's registry, metric types and text
// format), served at http://--metrics_listen/metrics (metrics_http.h). Counters and histograms are
// updated where things happen: every RPC by a server interceptor, each checkpoint write. Everything
// about jobs (by state, the queue, each running job's rates, skips and loss scale), open streams
// and memory is read when the endpoint is scraped, so a training step does no work for metrics.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/metrics_http.h"

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Counter;
class Histogram;
}  // namespace prometheus

namespace ampd::server {

// What the job manager reports at a scrape.
struct RunningJobMetrics {
  std::string id;
  int64_t step = 0;
  int64_t skipped_steps = 0;
  double steps_per_s = 0;
  double samples_per_s = 0;
  double loss_scale = 0;
  // Language models (0 for others: no sample is exported).
  double tokens_per_s = 0;
  double mfu = 0;
};
struct JobsSnapshot {
  std::map<std::string, int> by_state;  // every state's name, zeros included
  int queue_depth = 0;
  std::vector<RunningJobMetrics> running;
  // Jobs whose records are in memory (active, or ended and not yet all in
  // the store), and the ended-job cache's size: what bounds ampd's memory.
  int64_t jobs_in_memory = 0;
  int64_t ended_job_cache_bytes = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();

  void ObserveRpc(const std::string& method, const std::string& code, double seconds);
  void ObserveCheckpointWrite(double seconds, int64_t bytes);
  // Read at each scrape.
  std::function<JobsSnapshot()> jobs;
  std::function<int()> open_streams;
  std::function<int64_t()> event_serializations;  // events serialized for streams, ever

  // The gRPC interceptor that counts and times every RPC by method and code.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcInterceptorFactory();
  // The exposition text of every metric (what /metrics serves).
  std::string Text() const;

  // Serves /metrics on `listen` (HOST:PORT, port 0 picks a free one) until
  // this object is destroyed; returns the port.
  absl::StatusOr<int> Serve(const std::string& listen);
  void StopServing();

 private:
  class ScrapeTimeGauges;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ScrapeTimeGauges> gauges_;
  prometheus::Family<prometheus::Counter>* rpcs_;
  prometheus::Family<prometheus::Histogram>* rpc_seconds_;
  prometheus::Counter* checkpoints_;
  prometheus::Counter* checkpoint_bytes_;
  prometheus::Histogram* checkpoint_seconds_;
  std::unique_ptr<MetricsHttpServer> http_;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_METRICS_H_
