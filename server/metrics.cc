#include "server/metrics.h"

#include <chrono>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace ampd::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Gauge(const std::string& name, const std::string& help) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = MetricType::Gauge;
  return f;
}

void AddSample(MetricFamily* f, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f->metric.push_back(std::move(m));
}

// The process's resident set (Linux /proc/self/statm: pages).
double ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return static_cast<double>(resident) * 4096.0;
}

// "INVALID_ARGUMENT" etc.: gRPC's codes are absl's, number for number.
std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// Times one RPC from its start to the status it sends (a stream: its whole
// life); an RPC that ends without sending one (the client went away) counts
// as CANCELLED when the interceptor is destroyed.
class RpcInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(std::string method, ServerMetrics* metrics)
      : method_(std::move(method)), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}
  ~RpcInterceptor() override {
    if (!recorded_) Record("CANCELLED");
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(CodeName(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  void Record(const std::string& code) {
    recorded_ = true;
    metrics_->ObserveRpc(
        method_, code,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  std::string method_;
  ServerMetrics* metrics_;
  std::chrono::steady_clock::time_point start_;
  bool recorded_ = false;
};

class RpcInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(ServerMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(info->method() ? info->method() : "", metrics_);
  }

 private:
  ServerMetrics* metrics_;
};

// Latency buckets from 100 us to about 100 s.
prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1e-4; v < 200; v *= 4) b.push_back(v);
  return b;
}

}  // namespace

// Job, stream and memory gauges, computed at each scrape.
class ServerMetrics::ScrapeTimeGauges : public prometheus::Collectable {
 public:
  explicit ScrapeTimeGauges(const ServerMetrics* owner) : owner_(owner) {}
  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out;
    if (owner_->jobs) {
      const JobsSnapshot s = owner_->jobs();
      MetricFamily by_state = Gauge("ampd_jobs", "Jobs by state.");
      for (const auto& [state, n] : s.by_state) AddSample(&by_state, n, {{"state", state}});
      out.push_back(std::move(by_state));
      MetricFamily queue = Gauge("ampd_queue_depth", "Jobs waiting for a worker.");
      AddSample(&queue, s.queue_depth);
      out.push_back(std::move(queue));
      MetricFamily in_memory =
          Gauge("ampd_jobs_in_memory",
                "Jobs held in memory: queued, running, and ended ones not yet all in the store.");
      AddSample(&in_memory, s.jobs_in_memory);
      out.push_back(std::move(in_memory));
      MetricFamily cache = Gauge("ampd_ended_job_cache_bytes",
                                 "Ended jobs' records and history pages cached from the store.");
      AddSample(&cache, s.ended_job_cache_bytes);
      out.push_back(std::move(cache));
      MetricFamily step = Gauge("ampd_job_step", "A running job's last finished step.");
      MetricFamily steps_per_s = Gauge("ampd_job_steps_per_second", "A running job's step rate.");
      MetricFamily samples_per_s =
          Gauge("ampd_job_samples_per_second", "A running job's training samples per second.");
      MetricFamily skipped =
          Gauge("ampd_job_skipped_steps", "Steps a running job skipped (non-finite gradients).");
      MetricFamily scale = Gauge("ampd_job_loss_scale", "A running job's loss scale.");
      MetricFamily tokens_per_s = Gauge("ampd_job_tokens_per_second",
                                        "A running language model's training tokens per second.");
      MetricFamily mfu = Gauge("ampd_job_mfu",
                               "A running language model's model FLOPs utilisation (0..1): "
                               "6N + 12LTC FLOPs a token over the device's peak.");
      for (const RunningJobMetrics& j : s.running) {
        const std::vector<ClientMetric::Label> job = {{"job", j.id}};
        AddSample(&step, static_cast<double>(j.step), job);
        AddSample(&steps_per_s, j.steps_per_s, job);
        AddSample(&samples_per_s, j.samples_per_s, job);
        AddSample(&skipped, static_cast<double>(j.skipped_steps), job);
        AddSample(&scale, j.loss_scale, job);
        if (j.tokens_per_s > 0) {
          AddSample(&tokens_per_s, j.tokens_per_s, job);
          AddSample(&mfu, j.mfu, job);
        }
      }
      for (auto* f : {&step, &steps_per_s, &samples_per_s, &skipped, &scale, &tokens_per_s, &mfu}) {
        out.push_back(std::move(*f));
      }
    }
    if (owner_->open_streams) {
      MetricFamily streams = Gauge("ampd_open_streams", "StreamMetrics calls open now.");
      AddSample(&streams, owner_->open_streams());
      out.push_back(std::move(streams));
    }
    if (owner_->event_serializations) {
      // Each event is serialized once for all the streams that send it.
      MetricFamily f;
      f.name = "ampd_stream_event_serializations_total";
      f.help = "Events serialized for StreamMetrics (once each, whatever the number of streams).";
      f.type = MetricType::Counter;
      ClientMetric m;
      m.counter.value = static_cast<double>(owner_->event_serializations());
      f.metric.push_back(std::move(m));
      out.push_back(std::move(f));
    }
    MetricFamily device = Gauge("ampd_device_memory_in_use_bytes",
                                "Device memory the engine holds (its caching allocator).");
    for (engine::Device d : {engine::Device::kCpu, engine::Device::kCuda}) {
      absl::StatusOr<engine::backend::Backend*> be = engine::backend::BackendFor(d);
      if (!be.ok()) continue;
      AddSample(&device, static_cast<double>((*be)->MemoryStats().in_use_bytes),
                {{"device", (*be)->name()}});
    }
    out.push_back(std::move(device));
    MetricFamily rss = Gauge("ampd_resident_memory_bytes", "The server process's resident set.");
    AddSample(&rss, ResidentBytes());
    out.push_back(std::move(rss));
    return out;
  }

 private:
  const ServerMetrics* owner_;
};

ServerMetrics::ServerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      gauges_(std::make_shared<ScrapeTimeGauges>(this)) {
  rpcs_ = &prometheus::BuildCounter()
               .Name("ampd_rpcs_total")
               .Help("RPCs finished, by method and status code.")
               .Register(*registry_);
  rpc_seconds_ = &prometheus::BuildHistogram()
                      .Name("ampd_rpc_duration_seconds")
                      .Help("RPC latency (a stream: its whole life), by method and status code.")
                      .Register(*registry_);
  checkpoints_ = &prometheus::BuildCounter()
                      .Name("ampd_checkpoints_total")
                      .Help("Checkpoints written.")
                      .Register(*registry_)
                      .Add({});
  checkpoint_bytes_ = &prometheus::BuildCounter()
                           .Name("ampd_checkpoint_bytes_total")
                           .Help("Bytes of checkpoints written.")
                           .Register(*registry_)
                           .Add({});
  checkpoint_seconds_ = &prometheus::BuildHistogram()
                             .Name("ampd_checkpoint_write_seconds")
                             .Help("Time to write one checkpoint.")
                             .Register(*registry_)
                             .Add({}, SecondsBuckets());
}

ServerMetrics::~ServerMetrics() { StopServing(); }

void ServerMetrics::ObserveRpc(const std::string& method, const std::string& code, double seconds) {
  rpcs_->Add({{"method", method}, {"code", code}}).Increment();
  rpc_seconds_->Add({{"method", method}, {"code", code}}, SecondsBuckets()).Observe(seconds);
}

void ServerMetrics::ObserveCheckpointWrite(double seconds, int64_t bytes) {
  checkpoints_->Increment();
  checkpoint_bytes_->Increment(static_cast<double>(bytes));
  checkpoint_seconds_->Observe(seconds);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
ServerMetrics::RpcInterceptorFactory() {
  return std::make_unique<ampd::server::RpcInterceptorFactory>(this);
}

std::string ServerMetrics::Text() const {
  std::vector<MetricFamily> all = registry_->Collect();
  for (MetricFamily& f : gauges_->Collect()) all.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(all);
}

absl::StatusOr<int> ServerMetrics::Serve(const std::string& listen) {
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(listen, [this] { return Text(); });
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("--metrics_listen=", listen, ": ", server.status().message()));
  }
  http_ = *std::move(server);
  return http_->port();
}

void ServerMetrics::StopServing() { http_.reset(); }

}  // namespace ampd::server
