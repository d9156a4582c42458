// The soak benchmark (not a test; see bench/README.md): does ampd's memory
// stay bounded by what is active, however many jobs it has run?
//
// 1. An empty ampd (fresh data dir): its resident set, idle.
// 2. A fresh ampd runs --jobs small jobs, submitted by --clients threads, each
//    creating a job and following its StreamMetrics to the end (so the queue
//    stays short and every job is watched live). Every --sample_every finished
//    jobs: the server's RSS and ampd_jobs_in_memory.
// 3. ampd is stopped and started again on the same data dir: its RSS, idle,
//    against the empty server's (target: within 20 %).
// 4. Streams from step 0 of --replays old jobs, picked evenly over the run:
//    each must return every event once (sequences 0..n-1, the final state
//    last) and the very bytes the live stream delivered.
//
//   bazel run -c opt //bench:soak_bench -- [--jobs=20000] [--clients=8] ...

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "tests/server/ampd_process.h"

ABSL_FLAG(int64_t, jobs, 20000, "Small jobs to run");
ABSL_FLAG(int64_t, clients, 8, "Client threads, each with one job in flight");
ABSL_FLAG(int64_t, steps, 5, "Steps per job");
ABSL_FLAG(int64_t, sample_every, 1000, "Finished jobs between RSS samples");
ABSL_FLAG(int64_t, replays, 50, "Old jobs streamed from step 0 after the restart");
ABSL_FLAG(int64_t, idle_ms, 3000, "How long a server idles before its RSS is read");
ABSL_FLAG(std::string, ampd, "", "The ampd binary (default: the runfile server/ampd)");
ABSL_FLAG(std::vector<std::string>, ampd_flag, {},
          "Extra ampd flags, comma-separated (--ampd_flag=--F1=V1,--F2=V2)");

namespace {

namespace v1 = ::ampd::v1;
using ampd::testing::AmpdOptions;
using ampd::testing::AmpdProcess;
using Clock = std::chrono::steady_clock;

double RssMib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream in(line.substr(6));
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
  }
  return -1;
}

std::unique_ptr<AmpdProcess> Start(const std::string& data_dir) {
  AmpdOptions o;
  o.binary = absl::GetFlag(FLAGS_ampd);
  o.data_dir = data_dir;
  o.flags = {"--max_queued_jobs_per_principal=1000"};
  for (const std::string& f : absl::GetFlag(FLAGS_ampd_flag)) o.flags.push_back(f);
  o.start_timeout = std::chrono::seconds(120);
  std::unique_ptr<AmpdProcess> p = AmpdProcess::Start(o);
  if (!p || !p->ok()) {
    std::fprintf(stderr, "ampd did not start: %s\n", p ? p->LogTail().c_str() : "");
    std::exit(1);
  }
  return p;
}

double IdleRss(const AmpdProcess& p) {
  std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_idle_ms)));
  return RssMib(p.pid());
}

// A whole stream: ok, the events' count, and a digest of their bytes.
struct Seen {
  bool ok = false;
  std::string why;
  int64_t events = 0;
  uint64_t digest = 1469598103934665603ull;
};

Seen Stream(v1::TrainingService::Stub* stub, const std::string& name, bool history_only) {
  Seen seen;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  v1::StreamMetricsRequest req;
  req.set_name(name);
  req.set_history_only(history_only);
  auto reader = stub->StreamMetrics(&ctx, req);
  v1::MetricsEvent e;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&e)) {
    if (e.has_heartbeat()) continue;
    if (e.sequence() != seen.events) {
      seen.why = absl::StrFormat("event %d has sequence %d", seen.events, e.sequence());
      return seen;
    }
    ++seen.events;
    for (char c : e.SerializeAsString()) {
      seen.digest = (seen.digest ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    last = e.has_state() ? e.state().state() : v1::JOB_STATE_UNSPECIFIED;
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) {
    seen.why = "stream ended with " + s.error_message();
  } else if (last != v1::SUCCEEDED) {
    seen.why = "the last event is not the SUCCEEDED state";
  } else {
    seen.ok = true;
  }
  return seen;
}

struct Sample {
  int64_t finished;
  double seconds;
  double rss_mib;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int64_t total = absl::GetFlag(FLAGS_jobs);
  const int64_t every = std::max<int64_t>(1, absl::GetFlag(FLAGS_sample_every));
  const char* tmp = std::getenv("TMPDIR");
  const std::string root =
      std::string(tmp ? tmp : "/tmp") + "/ampd_soak_" + std::to_string(getpid());

  // 1. Empty.
  double empty_rss;
  {
    std::unique_ptr<AmpdProcess> empty = Start(root + "/empty");
    empty_rss = IdleRss(*empty);
    empty->Stop();
  }
  std::printf("empty server, idle: RSS %.1f MiB\n", empty_rss);

  // 2. The run.
  const std::string data = root + "/data";
  std::unique_ptr<AmpdProcess> server = Start(data);
  v1::JobSpec spec;
  if (!google::protobuf::util::JsonStringToMessage(
           ampd::testing::TinyJobJson(static_cast<int>(absl::GetFlag(FLAGS_steps))), &spec)
           .ok()) {
    return 1;
  }
  std::mutex mu;
  std::vector<std::pair<std::string, Seen>> done;  // in finishing order
  std::vector<Sample> samples;
  std::atomic<int64_t> next{0}, failures{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < absl::GetFlag(FLAGS_clients); ++c) {
    clients.emplace_back([&, c] {
      auto stub = v1::TrainingService::NewStub(server->channel());
      while (next.fetch_add(1) < total) {
        v1::CreateJobRequest req;
        *req.mutable_spec() = spec;
        req.mutable_spec()->mutable_training()->set_seed(static_cast<int>(c));
        v1::Job job;
        grpc::ClientContext ctx;
        grpc::Status s = stub->CreateJob(&ctx, req, &job);
        if (!s.ok()) {
          std::fprintf(stderr, "CreateJob: %s\n", s.error_message().c_str());
          ++failures;
          continue;
        }
        Seen seen = Stream(stub.get(), job.name(), /*history_only=*/false);
        if (!seen.ok) {
          std::fprintf(stderr, "live stream of %s: %s\n", job.id().c_str(), seen.why.c_str());
          ++failures;
        }
        std::lock_guard<std::mutex> lock(mu);
        done.emplace_back(job.name(), seen);
        const int64_t n = static_cast<int64_t>(done.size());
        if (n % every == 0) {
          samples.push_back(
              {n, std::chrono::duration<double>(Clock::now() - t0).count(), RssMib(server->pid())});
          std::fprintf(stderr, "%lld jobs: RSS %.1f MiB\n", static_cast<long long>(n),
                       samples.back().rss_mib);
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const double run_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double end_rss = IdleRss(*server);
  server->Stop();

  // 3. Restart.
  server = Start(data);
  const double restart_rss = IdleRss(*server);

  // 4. Old jobs from step 0.
  auto stub = v1::TrainingService::NewStub(server->channel());
  int64_t replay_failures = 0, replayed = 0;
  const int64_t replays = std::min<int64_t>(absl::GetFlag(FLAGS_replays), done.size());
  for (int64_t i = 0; i < replays; ++i) {
    const auto& [name, live] = done[static_cast<size_t>(i * done.size() / replays)];
    const Seen again = Stream(stub.get(), name, /*history_only=*/true);
    ++replayed;
    if (!again.ok || again.events != live.events || again.digest != live.digest) {
      ++replay_failures;
      std::fprintf(stderr, "replay of %s: %s (%lld events, live %lld)\n", name.c_str(),
                   again.ok ? "differs from the live stream" : again.why.c_str(),
                   static_cast<long long>(again.events), static_cast<long long>(live.events));
    }
  }
  const double after_replays_rss = RssMib(server->pid());
  server->Stop();
  std::error_code ec;
  std::filesystem::remove_all(root, ec);

  std::printf(
      "\n%lld jobs of %lld steps in %.0f s (%.1f jobs/s), %lld client threads; "
      "%lld failures\n\n",
      static_cast<long long>(done.size()), static_cast<long long>(absl::GetFlag(FLAGS_steps)),
      run_s, done.size() / run_s, static_cast<long long>(absl::GetFlag(FLAGS_clients)),
      static_cast<long long>(failures.load()));
  std::printf("| finished jobs | seconds | RSS MiB |\n|---:|---:|---:|\n");
  for (const Sample& s : samples) {
    std::printf("| %lld | %.0f | %.1f |\n", static_cast<long long>(s.finished), s.seconds,
                s.rss_mib);
  }
  std::printf("| %zu (idle, end) | %.0f | %.1f |\n\n", done.size(), run_s, end_rss);
  if (samples.size() >= 2) {
    // The second half: by then the ended-job cache (bounded) has filled.
    const Sample& first = samples[samples.size() / 2 - (samples.size() % 2 == 0 ? 1 : 0)];
    const Sample& last = samples.back();
    const double per_k = (last.rss_mib - first.rss_mib) /
                         std::max<double>(1, (last.finished - first.finished) / 1000.0);
    double peak = 0;
    for (const Sample& s : samples) peak = std::max(peak, s.rss_mib);
    std::printf(
        "RSS during the run: peak %.1f MiB; %.1f MiB at %lld jobs, %.1f MiB at %lld: "
        "%+.2f MiB per 1000 finished jobs (target: no growth with finished jobs, "
        "< 0.5 MiB per 1000: %s)\n",
        peak, first.rss_mib, static_cast<long long>(first.finished), last.rss_mib,
        static_cast<long long>(last.finished), per_k, per_k < 0.5 ? "met" : "NOT met");
  }
  const double ratio = restart_rss / empty_rss;
  std::printf(
      "RSS after the restart, idle: %.1f MiB, %.2fx the empty server's %.1f MiB "
      "(target <= 1.20: %s)\n",
      restart_rss, ratio, empty_rss, ratio <= 1.20 ? "met" : "NOT met");
  std::printf(
      "streams from step 0 of %lld old jobs after the restart: %lld differ from what was "
      "streamed live (target 0: %s); RSS after them %.1f MiB\n",
      static_cast<long long>(replayed), static_cast<long long>(replay_failures),
      replay_failures == 0 ? "met" : "NOT met", after_replays_rss);
  return failures == 0 && replay_failures == 0 ? 0 : 1;
}
