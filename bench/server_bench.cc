// The server benchmark (not a test; see bench/README.md). It starts the real
// `ampd` binary on a free loopback port and measures it over gRPC:
//
// 1. getjob_latency: M sequential unary GetJob calls on one channel for one
//    finished job; p50 / p99 / mean per call.
// 2. createjob_throughput: K CreateJob calls from T client threads (one
//    channel, i.e. one connection, each) while the single training worker is
//    parked, so the jobs only queue; they are cancelled and deleted afterwards.
// 3. stream_fanout: one job of a fixed number of steps, watched live by N
//    StreamMetrics subscribers (N = 0 is the baseline). Subscribers are
//    callback-API reactors (no thread per stream), spread over channels of
//    --streams_per_channel streams each, all attached before the job starts.
//    For each N: the job's wall time per step (from polled progress) against
//    N = 0, events delivered per second, and whether every subscriber read the
//    job's whole history, identical.
//
// "Parked": the worker runs one job at a time, so a gate job whose training
// CSV is a FIFO in the server's data dir holds it (blocked in open(), no CPU)
// until the benchmark opens and closes the FIFO; the gate job then fails
// (empty CSV) and the next queued job starts. This lets N streams attach to a
// queued job before it starts, and keeps training out of the CreateJob timing.
//
//   bazel run -c opt //bench:server_bench -- [--json] [--subscribers=10,100,1000]
//       [--rounds=N] [--omp_threads=N] ...   (--help lists every flag)

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/server/ampd_process.h"

ABSL_FLAG(bool, json, false, "JSON lines instead of tables");
ABSL_FLAG(std::string, ampd, "", "The ampd binary (default: the runfile server/ampd)");
ABSL_FLAG(std::vector<std::string>, ampd_flag, {},
          "Extra ampd flags, comma-separated (--ampd_flag=--F1=V1,--F2=V2)");
ABSL_FLAG(int64_t, getjob_calls, 5000, "Timed sequential GetJob calls");
ABSL_FLAG(int64_t, create_calls, 2000, "Timed CreateJob calls, all threads together");
ABSL_FLAG(int64_t, create_threads, 4, "CreateJob client threads (one channel each)");
ABSL_FLAG(std::vector<std::string>, subscribers, std::vector<std::string>({"10", "100", "1000"}),
          "Subscriber counts of the fan-out (0, the baseline, always runs)");
ABSL_FLAG(int64_t, rounds, 2, "Runs of every subscriber count");
ABSL_FLAG(int64_t, steps, 1500, "Steps of the watched job");
ABSL_FLAG(int64_t, batch, 128, "The watched job's batch size");
ABSL_FLAG(int64_t, features, 256, "The watched job's synthetic input width");
ABSL_FLAG(std::vector<std::string>, hidden, std::vector<std::string>({"512", "512"}),
          "The watched job's hidden widths");
ABSL_FLAG(int64_t, streams_per_channel, 100, "Streams per client channel (TCP connection)");
ABSL_FLAG(int64_t, omp_threads, 0, "OMP_NUM_THREADS for ampd; 0: inherited");
ABSL_FLAG(double, busy_cores, 0.25, "A fan-out run with more foreign CPU load is run again");
ABSL_FLAG(int64_t, busy_retries, 3, "At most this many times");
ABSL_FLAG(bool, no_unary, false, "Skip the unary section");
ABSL_FLAG(bool, no_streams, false, "Skip the stream fan-out section");

namespace ampd::bench {
namespace {

namespace v1 = ::ampd::v1;
using Clock = std::chrono::steady_clock;

struct Options {
  bool json = false;
  std::string ampd;                     // path of the ampd binary; default: runfiles
  std::vector<std::string> ampd_flags;  // appended to ampd's command line
  int64_t getjob_calls = 5000;          // timed sequential GetJob calls
  int64_t create_calls = 2000;          // timed CreateJob calls, all threads together
  int64_t create_threads = 4;           // client threads (one channel each)
  std::vector<int64_t> subscribers = {10, 100, 1000};
  int64_t rounds = 2;    // runs of every subscriber count
  int64_t steps = 1500;  // steps of the watched job
  int64_t batch = 128;
  int64_t features = 256;  // synthetic input width
  std::vector<int64_t> hidden = {512, 512};
  int64_t streams_per_channel = 100;
  int64_t omp_threads = 0;   // OMP_NUM_THREADS for ampd; 0: inherit
  double busy_cores = 0.25;  // a fan-out run with more foreign CPU load is redone
  int64_t busy_retries = 3;  // at most this many times
  bool unary = true;
  bool streams = true;
};

// A comma-separated list of integers >= min ("" is an error).
bool ParseList(const char* flag, const std::vector<std::string>& parts, int64_t min,
               std::vector<int64_t>* out) {
  out->clear();
  for (const std::string& part : parts) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < min) {
      std::fprintf(stderr, "--%s: expected integers >= %lld, got '%s'\n", flag,
                   static_cast<long long>(min), part.c_str());
      return false;
    }
    out->push_back(v);
  }
  if (out->empty()) {
    std::fprintf(stderr, "--%s: empty list\n", flag);
    return false;
  }
  return true;
}

bool ReadFlags(Options* o) {
  o->json = absl::GetFlag(FLAGS_json);
  o->ampd = absl::GetFlag(FLAGS_ampd);
  o->ampd_flags = absl::GetFlag(FLAGS_ampd_flag);
  o->unary = !absl::GetFlag(FLAGS_no_unary);
  o->streams = !absl::GetFlag(FLAGS_no_streams);
  o->busy_cores = absl::GetFlag(FLAGS_busy_cores);
  struct IntFlag {
    const char* name;
    int64_t value, min;
    int64_t* out;
  };
  const IntFlag ints[] = {
      {"getjob_calls", absl::GetFlag(FLAGS_getjob_calls), 1, &o->getjob_calls},
      {"create_calls", absl::GetFlag(FLAGS_create_calls), 1, &o->create_calls},
      {"create_threads", absl::GetFlag(FLAGS_create_threads), 1, &o->create_threads},
      {"rounds", absl::GetFlag(FLAGS_rounds), 1, &o->rounds},
      {"steps", absl::GetFlag(FLAGS_steps), 1, &o->steps},
      {"batch", absl::GetFlag(FLAGS_batch), 1, &o->batch},
      {"features", absl::GetFlag(FLAGS_features), 1, &o->features},
      {"streams_per_channel", absl::GetFlag(FLAGS_streams_per_channel), 1,
       &o->streams_per_channel},
      {"omp_threads", absl::GetFlag(FLAGS_omp_threads), 0, &o->omp_threads},
      {"busy_retries", absl::GetFlag(FLAGS_busy_retries), 0, &o->busy_retries},
  };
  for (const IntFlag& f : ints) {
    if (f.value < f.min) {
      std::fprintf(stderr, "--%s: expected an integer >= %lld, got %lld\n", f.name,
                   static_cast<long long>(f.min), static_cast<long long>(f.value));
      return false;
    }
    *f.out = f.value;
  }
  if (!(o->busy_cores > 0)) {
    std::fprintf(stderr, "--busy_cores: expected a number > 0, got %g\n", o->busy_cores);
    return false;
  }
  return ParseList("subscribers", absl::GetFlag(FLAGS_subscribers), 1, &o->subscribers) &&
         ParseList("hidden", absl::GetFlag(FLAGS_hidden), 1, &o->hidden);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}

bool IsTerminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

std::string Describe(const grpc::Status& s) {
  return absl::StrCat("code ", static_cast<int>(s.error_code()), ": ", s.error_message());
}

// A channel with its own connection: the default global subchannel pool would
// put every channel to the same address on one TCP connection.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int index) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("ampd.bench.channel_index", index);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return channel;
}

// ---------------------------------------------------------------------------
// Job specs and small RPC helpers

v1::JobSpec TinySpec() {
  v1::JobSpec spec;
  spec.set_display_name("bench-tiny");
  spec.mutable_model()->mutable_mlp()->add_hidden(16);
  v1::SyntheticDataset* d = spec.mutable_data()->mutable_synthetic();
  d->set_num_examples(512);
  d->set_feature_dim(8);
  d->set_num_classes(3);
  d->set_num_test_examples(128);
  d->set_seed(7);
  spec.mutable_precision()->set_profile("32-true");
  spec.mutable_training()->set_steps(10);
  spec.mutable_training()->set_batch_size(32);
  return spec;
}

// The watched job: a fixed number of steps, one evaluation (at the end).
v1::JobSpec WatchedSpec(const Options& o) {
  v1::JobSpec spec;
  spec.set_display_name("bench-watched");
  for (int64_t h : o.hidden) spec.mutable_model()->mutable_mlp()->add_hidden(h);
  v1::SyntheticDataset* d = spec.mutable_data()->mutable_synthetic();
  d->set_num_examples(std::max<int64_t>(4096, o.batch * 8));
  d->set_feature_dim(o.features);
  d->set_num_classes(10);
  d->set_num_test_examples(256);
  d->set_seed(1);
  spec.mutable_precision()->set_profile("32-true");
  v1::TrainingSpec* t = spec.mutable_training();
  t->set_steps(o.steps);
  t->set_batch_size(o.batch);
  t->set_eval_interval(o.steps);
  t->set_seed(3);
  return spec;
}

constexpr char kGateFifo[] = "gate.fifo";

v1::JobSpec GateSpec() {
  v1::JobSpec spec;
  spec.set_display_name("bench-gate");
  spec.mutable_model()->mutable_mlp()->add_hidden(8);
  v1::FileDataset* f = spec.mutable_data()->mutable_file();
  f->set_format(v1::FileDataset::FORMAT_CSV);
  f->set_train_csv(kGateFifo);
  spec.mutable_training()->set_steps(1);
  return spec;
}

grpc::Status Create(v1::TrainingService::Stub* stub, const v1::JobSpec& spec,
                    const std::string& request_id, v1::Job* job) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::CreateJobRequest req;
  *req.mutable_spec() = spec;
  req.set_request_id(request_id);
  return stub->CreateJob(&ctx, req, job);
}

grpc::Status Get(v1::TrainingService::Stub* stub, const std::string& name, v1::Job* job) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetJobRequest req;
  req.set_name(name);
  return stub->GetJob(&ctx, req, job);
}

grpc::Status CancelAndDelete(v1::TrainingService::Stub* stub, const std::string& name) {
  v1::Job job;
  grpc::Status s = Get(stub, name, &job);
  if (!s.ok()) return s;
  if (!IsTerminal(job.state())) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_name(name);
    s = stub->CancelJob(&ctx, req, &job);
    if (!s.ok()) return s;
  }
  grpc::ClientContext ctx;
  v1::DeleteJobRequest req;
  req.set_name(name);
  google::protobuf::Empty empty;
  return stub->DeleteJob(&ctx, req, &empty);
}

// Polls until `pred(job)` or the timeout; false on an RPC error or timeout.
bool WaitForJob(v1::TrainingService::Stub* stub, const std::string& name, double timeout_s,
                int poll_ms, const std::function<bool(const v1::Job&)>& pred, v1::Job* job,
                std::string* error) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(timeout_s));
  while (true) {
    grpc::Status s = Get(stub, name, job);
    if (!s.ok()) {
      *error = absl::StrCat("GetJob ", name, ": ", Describe(s));
      return false;
    }
    if (pred(*job)) return true;
    if (Clock::now() > deadline) {
      *error = absl::StrCat("timed out waiting for ", name, " (state ",
                            v1::JobState_Name(job->state()), ")");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

// Holds the server's only training worker (see the top of the file).
class Gate {
 public:
  Gate(v1::TrainingService::Stub* stub, std::string dir)
      : stub_(stub), fifo_(std::move(dir) + "/" + kGateFifo) {}
  ~Gate() {
    std::string ignored;
    Release(&ignored);
  }

  bool Park(std::string* error) {
    if (access(fifo_.c_str(), F_OK) != 0 && mkfifo(fifo_.c_str(), 0600) != 0) {
      *error = absl::StrCat("mkfifo ", fifo_, ": ", std::strerror(errno));
      return false;
    }
    v1::Job job;
    grpc::Status s = Create(stub_, GateSpec(), "", &job);
    if (!s.ok()) {
      *error = "CreateJob (gate): " + Describe(s);
      return false;
    }
    name_ = job.name();
    return WaitForJob(
        stub_, name_, 60, 1, [](const v1::Job& j) { return j.state() != v1::QUEUED; }, &job, error);
  }

  // Lets the gate job's read of the FIFO end (EOF: it fails), then deletes it.
  bool Release(std::string* error) {
    if (name_.empty()) return true;
    const std::string name = name_;
    name_.clear();
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
    while (true) {
      const int fd = open(fifo_.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) {
        close(fd);
        break;
      }
      if (errno != ENXIO || Clock::now() > deadline) {  // ENXIO: no reader yet
        *error = absl::StrCat("open ", fifo_, ": ", std::strerror(errno));
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    v1::Job job;
    if (!WaitForJob(
            stub_, name, 60, 1, [](const v1::Job& j) { return IsTerminal(j.state()); }, &job,
            error)) {
      return false;
    }
    grpc::Status s = CancelAndDelete(stub_, name);
    if (!s.ok()) {
      *error = "DeleteJob (gate): " + Describe(s);
      return false;
    }
    return true;
  }

 private:
  v1::TrainingService::Stub* stub_;
  std::string fifo_;
  std::string name_;
};

struct Context {
  const Options* options;
  testing::AmpdProcess* server;
  std::string dir;
  std::shared_ptr<grpc::Channel> channel;  // for control calls
  std::unique_ptr<v1::TrainingService::Stub> stub;
};

// CPU time used on the machine by everything, and by ampd and this process.
struct CpuSample {
  Clock::time_point when;
  double busy_s = 0;  // all CPUs, every process
  double ours_s = 0;  // ampd + this benchmark
};

double ProcessCpuSeconds(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
  // After "pid (comm) ": state is field 0, utime 11, stime 12.
  double utime = 0, stime = 0;
  if (f.size() < 13 || !absl::SimpleAtod(f[11], &utime) || !absl::SimpleAtod(f[12], &stime)) {
    return 0;
  }
  return (utime + stime) / sysconf(_SC_CLK_TCK);
}

CpuSample SampleCpu(pid_t server) {
  CpuSample c;
  c.when = Clock::now();
  std::ifstream in("/proc/stat");
  std::string cpu;
  double v[8] = {0};  // user nice system idle iowait irq softirq steal
  in >> cpu;
  for (double& x : v) in >> x;
  // Interrupt time is left out: it is mostly our own loopback traffic.
  c.busy_s = (v[0] + v[1] + v[2] + v[7]) / sysconf(_SC_CLK_TCK);
  c.ours_s = ProcessCpuSeconds("/proc/self/stat") +
             ProcessCpuSeconds(absl::StrCat("/proc/", server, "/stat"));
  return c;
}

// Average cores used by other processes between two samples.
double ForeignCores(const CpuSample& a, const CpuSample& b) {
  const double wall = Seconds(b.when - a.when);
  if (wall <= 0) return 0;
  return std::max(0.0, ((b.busy_s - a.busy_s) - (b.ours_s - a.ours_s)) / wall);
}

// ---------------------------------------------------------------------------
// Unary calls

int RunGetJob(Context& c) {
  const Options& o = *c.options;
  v1::Job job;
  grpc::Status s = Create(c.stub.get(), TinySpec(), "", &job);
  std::string error;
  if (!s.ok()) {
    std::fprintf(stderr, "CreateJob: %s\n", Describe(s).c_str());
    return 1;
  }
  if (!WaitForJob(
          c.stub.get(), job.name(), 120, 5, [](const v1::Job& j) { return IsTerminal(j.state()); },
          &job, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  const size_t job_bytes = job.ByteSizeLong();
  auto channel = OwnChannel(c.server->address(), 1000);
  auto stub = v1::TrainingService::NewStub(channel);
  const int64_t warmup = std::min<int64_t>(200, o.getjob_calls);
  std::vector<double> us;
  us.reserve(o.getjob_calls);
  CpuSample cpu_start;
  for (int64_t i = 0; i < warmup + o.getjob_calls; ++i) {
    if (i == warmup) cpu_start = SampleCpu(c.server->pid());
    v1::Job got;
    const Clock::time_point start = Clock::now();
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_name(job.name());
    s = stub->GetJob(&ctx, req, &got);
    const double t = Seconds(Clock::now() - start) * 1e6;
    if (!s.ok()) {
      std::fprintf(stderr, "GetJob: %s\n", Describe(s).c_str());
      return 1;
    }
    if (i >= warmup) us.push_back(t);
  }
  const double foreign = ForeignCores(cpu_start, SampleCpu(c.server->pid()));
  const double mean = Mean(us);
  std::sort(us.begin(), us.end());
  const double p50 = Percentile(us, 50), p99 = Percentile(us, 99), max = us.back();
  if (o.json) {
    std::printf(
        "{\"bench\":\"getjob_latency\",\"calls\":%lld,\"job_bytes\":%zu,\"p50_us\":%.1f,"
        "\"p99_us\":%.1f,\"mean_us\":%.1f,\"max_us\":%.1f,\"calls_per_s\":%.0f,"
        "\"foreign_cores\":%.3f}\n",
        static_cast<long long>(o.getjob_calls), job_bytes, p50, p99, mean, max, 1e6 / mean,
        foreign);
  } else {
    std::printf(
        "GetJob latency: %lld sequential calls on one channel (finished job, %zu-byte reply)\n"
        "  p50 %.1f us   p99 %.1f us   mean %.1f us   max %.1f us   (%.0f calls/s)\n"
        "  other processes used %.2f cores meanwhile\n\n",
        static_cast<long long>(o.getjob_calls), job_bytes, p50, p99, mean, max, 1e6 / mean,
        foreign);
  }
  std::fflush(stdout);
  CancelAndDelete(c.stub.get(), job.name());
  return 0;
}

int RunCreateJob(Context& c) {
  const Options& o = *c.options;
  std::string error;
  Gate gate(c.stub.get(), c.dir);
  if (!gate.Park(&error)) {
    std::fprintf(stderr, "gate: %s\n", error.c_str());
    return 1;
  }
  const int threads = static_cast<int>(o.create_threads);
  const v1::JobSpec spec = TinySpec();
  constexpr int kWarmupPerThread = 10;
  struct PerThread {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::TrainingService::Stub> stub;
    std::vector<std::string> names;
    std::vector<double> us;
    int errors = 0;
    std::string first_error;
    Clock::time_point end;
  };
  std::vector<PerThread> per(threads);
  for (int t = 0; t < threads; ++t) {
    per[t].channel = OwnChannel(c.server->address(), 2000 + t);
    per[t].stub = v1::TrainingService::NewStub(per[t].channel);
  }
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  bool go = false;
  Clock::time_point start;
  CpuSample cpu_start;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      PerThread& p = per[t];
      const int64_t calls = o.create_calls / threads + (t < o.create_calls % threads ? 1 : 0);
      auto one = [&](int64_t i, bool timed) {
        v1::Job job;
        const Clock::time_point t0 = Clock::now();
        grpc::Status s = Create(p.stub.get(), spec, absl::StrCat("bench-", t, "-", i), &job);
        const double us = Seconds(Clock::now() - t0) * 1e6;
        if (!s.ok()) {
          if (p.errors++ == 0) p.first_error = Describe(s);
          return;
        }
        p.names.push_back(job.name());
        if (timed) p.us.push_back(us);
      };
      for (int i = 0; i < kWarmupPerThread; ++i) one(-1 - i, false);
      {
        std::unique_lock<std::mutex> lock(mu);
        ++ready;
        cv.notify_all();
        cv.wait(lock, [&] { return go; });
      }
      for (int64_t i = 0; i < calls; ++i) one(i, true);
      p.end = Clock::now();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready == threads; });
    cpu_start = SampleCpu(c.server->pid());
    start = Clock::now();
    go = true;
    cv.notify_all();
  }
  for (std::thread& w : workers) w.join();
  const double foreign = ForeignCores(cpu_start, SampleCpu(c.server->pid()));
  Clock::time_point end = start;
  std::vector<double> us;
  int errors = 0;
  std::string first_error;
  for (const PerThread& p : per) {
    end = std::max(end, p.end);
    us.insert(us.end(), p.us.begin(), p.us.end());
    if (p.errors > 0 && errors == 0) first_error = p.first_error;
    errors += p.errors;
  }
  const double elapsed = Seconds(end - start);
  const double rate = us.size() / elapsed;
  std::sort(us.begin(), us.end());
  // Clean up: cancel (queued: at once) and delete every job, in parallel.
  workers.clear();
  std::atomic<int> cleanup_errors{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (const std::string& name : per[t].names) {
        if (!CancelAndDelete(per[t].stub.get(), name).ok()) ++cleanup_errors;
      }
    });
  }
  for (std::thread& w : workers) w.join();
  if (!gate.Release(&error)) {
    std::fprintf(stderr, "gate: %s\n", error.c_str());
    return 1;
  }
  if (o.json) {
    std::printf(
        "{\"bench\":\"createjob_throughput\",\"calls\":%zu,\"threads\":%d,\"seconds\":%.3f,"
        "\"creates_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"errors\":%d,"
        "\"foreign_cores\":%.3f}\n",
        us.size(), threads, elapsed, rate, Percentile(us, 50), Percentile(us, 99), errors, foreign);
  } else {
    std::printf(
        "CreateJob throughput: %zu calls from %d threads (one channel each), jobs only queue\n"
        "  %.0f creates/s   (%.3f s; per call p50 %.1f us, p99 %.1f us)   errors %d\n"
        "  other processes used %.2f cores meanwhile\n\n",
        us.size(), threads, rate, elapsed, Percentile(us, 50), Percentile(us, 99), errors, foreign);
  }
  if (errors > 0) std::fprintf(stderr, "CreateJob errors, first: %s\n", first_error.c_str());
  if (cleanup_errors > 0) std::fprintf(stderr, "%d jobs not cleaned up\n", cleanup_errors.load());
  std::fflush(stdout);
  return errors > 0 ? 1 : 0;
}

// ---------------------------------------------------------------------------
// StreamMetrics fan-out

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

uint64_t DoubleBits(double d) {
  uint64_t u = 0;
  std::memcpy(&u, &d, sizeof(u));
  return u;
}

// A digest of what identifies an event (its step, kind and main value).
uint64_t Digest(uint64_t h, const v1::MetricsEvent& e) {
  h = Mix(h, static_cast<uint64_t>(e.step()));
  h = Mix(h, static_cast<uint64_t>(e.event_case()));
  switch (e.event_case()) {
    case v1::MetricsEvent::kStepRecord:
      h = Mix(h, DoubleBits(e.step_record().loss()));
      break;
    case v1::MetricsEvent::kEval:
      h = Mix(h, DoubleBits(e.eval().accuracy()));
      break;
    case v1::MetricsEvent::kState:
      h = Mix(h, static_cast<uint64_t>(e.state().state()));
      break;
    default:
      break;
  }
  return h;
}

struct FanoutGroup {
  std::mutex mu;
  std::condition_variable cv;
  int attached = 0;  // subscribers that got their first event (or ended)
  int done = 0;

  void Attached() {
    std::lock_guard<std::mutex> lock(mu);
    ++attached;
    cv.notify_all();
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    cv.notify_all();
  }
  int Count(const int* counter) {
    std::lock_guard<std::mutex> lock(mu);
    return *counter;
  }
  bool WaitFor(const int* counter, int target, double timeout_s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                       [&] { return *counter >= target; });
  }
};

// One subscriber: reads the whole stream; no thread of its own.
class Subscriber final : public grpc::ClientReadReactor<v1::MetricsEvent> {
 public:
  Subscriber(FanoutGroup* group, v1::TrainingService::Stub* stub, const std::string& job)
      : group_(group) {
    request_.set_name(job);
    stub->async()->StreamMetrics(&ctx_, &request_, this);
    StartRead(&event_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    if (event_.has_heartbeat()) {
      ++heartbeats_;
    } else {
      ++events_;
      digest_ = Digest(digest_, event_);
    }
    if (!attached_) {
      attached_ = true;
      group_->Attached();
    }
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& s) override {
    status_ = s;
    end_ = Clock::now();
    FanoutGroup* group = group_;
    if (!attached_) group->Attached();
    group->Done();  // last: the owner may delete this object from now on
  }

  void Cancel() { ctx_.TryCancel(); }
  const grpc::Status& status() const { return status_; }
  int64_t events() const { return events_; }
  int64_t heartbeats() const { return heartbeats_; }
  uint64_t digest() const { return digest_; }
  Clock::time_point end() const { return end_; }

 private:
  FanoutGroup* group_;
  grpc::ClientContext ctx_;
  v1::StreamMetricsRequest request_;
  v1::MetricsEvent event_;
  bool attached_ = false;
  int64_t events_ = 0;
  int64_t heartbeats_ = 0;
  uint64_t digest_ = 0;
  grpc::Status status_;
  Clock::time_point end_;
};

struct FanoutRun {
  int64_t subscribers = 0;
  double step_ms = 0;     // wall time per step (StepTimeMs)
  double compute_ms = 0;  // mean of the trainer's own step times (StepRecord.samples_per_s)
  double delivery_s = 0;  // gate released .. last subscriber finished
  double lag_s = 0;       // job seen ended .. last subscriber finished
  double events_per_s = 0;
  int64_t job_events = 0;  // events in the job's history (one stream's worth)
  int64_t heartbeats = 0;
  bool complete = true;  // every subscriber: OK, job_events events, same digest
  int errors = 0;
  std::string first_error;
  double foreign_cores = 0;  // other processes' CPU use while the job ran
};

// The job's history read once after it ended: event count, digest, and the
// trainer's mean step time.
bool Replay(v1::TrainingService::Stub* stub, const std::string& name, int64_t batch,
            int64_t* events, uint64_t* digest, double* compute_ms,
            std::vector<std::pair<double, int64_t>>* step_times, std::string* error) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::StreamMetricsRequest req;
  req.set_name(name);
  auto reader = stub->StreamMetrics(&ctx, req);
  v1::MetricsEvent e;
  *events = 0;
  *digest = 0;
  std::vector<double> ms;
  int64_t first_seconds = -1;
  while (reader->Read(&e)) {
    if (e.has_heartbeat()) continue;
    ++*events;
    *digest = Digest(*digest, e);
    if (e.has_step_record() && e.step_record().samples_per_s() > 0) {
      ms.push_back(1e3 * batch / e.step_record().samples_per_s());
    }
    if (e.has_step_record() && e.step_record().has_time()) {
      // Seconds since the first record (times since 1970 squared would
      // lose the least-squares fit to rounding).
      const auto& t = e.step_record().time();
      if (first_seconds < 0) first_seconds = t.seconds();
      step_times->emplace_back(static_cast<double>(t.seconds() - first_seconds) + 1e-9 * t.nanos(),
                               e.step_record().step());
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) {
    *error = "replay: " + Describe(s);
    return false;
  }
  *compute_ms = Mean(ms);
  return true;
}

// GetJob polls while the watched job runs, at this interval (to see it end).
constexpr int kPollMs = 50;

// Wall time per step: the slope of a least-squares line through (time, step)
// pairs, using the steps between 5 % and 95 % of the run: unlike end_time -
// start_time it leaves out trainer set-up and the final evaluation. The
// times are the step records' own (StepRecord.time, taken on the training
// thread when each step ends), so the figure is what the job spent per
// step, everything on its thread included. (It used to come from GetJob
// polled by this benchmark, which at 1000 subscribers shares its core with
// the clients and the server's threads and got too few samples.)
double StepTimeMs(const std::vector<std::pair<double, int64_t>>& samples, int64_t total) {
  double n = 0, st = 0, ss = 0, stt = 0, sts = 0;
  for (const auto& [t, step] : samples) {
    if (step < total / 20 || step > total - total / 20) continue;
    n += 1;
    st += t;
    ss += static_cast<double>(step);
    stt += t * t;
    sts += t * static_cast<double>(step);
  }
  if (n < 5) return 0;
  const double denom = n * stt - st * st;
  if (denom <= 0) return 0;
  const double steps_per_s = (n * sts - st * ss) / denom;
  return steps_per_s > 0 ? 1e3 / steps_per_s : 0;
}

bool RunFanout(Context& c, const std::vector<std::unique_ptr<v1::TrainingService::Stub>>& stubs,
               int64_t n, FanoutRun* run, std::string* error) {
  const Options& o = *c.options;
  run->subscribers = n;
  Gate gate(c.stub.get(), c.dir);
  if (!gate.Park(error)) return false;
  v1::Job job;
  grpc::Status s = Create(c.stub.get(), WatchedSpec(o), "", &job);
  if (!s.ok()) {
    *error = "CreateJob: " + Describe(s);
    return false;
  }
  FanoutGroup group;
  std::vector<std::unique_ptr<Subscriber>> subs;
  // On an early return, open streams must end before their reactors are freed
  // (a reactor that does not end in time is leaked instead).
  struct Cleanup {
    FanoutGroup* group;
    std::vector<std::unique_ptr<Subscriber>>* subs;
    ~Cleanup() {
      if (subs->empty()) return;
      for (auto& sub : *subs) sub->Cancel();
      if (!group->WaitFor(&group->done, static_cast<int>(subs->size()), 30)) {
        for (auto& sub : *subs) sub.release();
      }
    }
  } cleanup{&group, &subs};
  subs.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    subs.emplace_back(new Subscriber(&group, stubs[i / o.streams_per_channel].get(), job.name()));
  }
  // Every stream open at once on the queued job (each has its QUEUED event).
  if (!group.WaitFor(&group.attached, static_cast<int>(n), 120)) {
    *error = absl::StrCat("only ", group.Count(&group.attached), " of ", n,
                          " streams attached within 120 s");
    return false;
  }
  const CpuSample cpu_start = SampleCpu(c.server->pid());
  const Clock::time_point released = Clock::now();
  if (!gate.Release(error)) return false;
  Clock::time_point ended;
  while (true) {
    const Clock::time_point t0 = Clock::now();
    s = Get(c.stub.get(), job.name(), &job);
    const Clock::time_point t1 = Clock::now();
    if (!s.ok()) {
      *error = "GetJob: " + Describe(s);
      return false;
    }
    if (IsTerminal(job.state())) {
      ended = t1;
      run->foreign_cores = ForeignCores(cpu_start, SampleCpu(c.server->pid()));
      break;
    }
    if (Seconds(t1 - released) > 3600) {
      *error = "the watched job ran for more than an hour";
      return false;
    }
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(kPollMs));
  }
  if (job.state() != v1::SUCCEEDED) {
    *error = absl::StrCat("watched job ended ", v1::JobState_Name(job.state()), ": ",
                          job.failure_reason());
    return false;
  }
  if (!group.WaitFor(&group.done, static_cast<int>(n), 600)) {
    *error = absl::StrCat("only ", group.Count(&group.done), " of ", n,
                          " streams finished within 600 s");
    return false;
  }
  uint64_t digest = 0;
  std::vector<std::pair<double, int64_t>> step_times;
  if (!Replay(c.stub.get(), job.name(), o.batch, &run->job_events, &digest, &run->compute_ms,
              &step_times, error)) {
    return false;
  }
  run->step_ms = StepTimeMs(step_times, o.steps);
  if (run->step_ms <= 0) {
    *error = absl::StrCat("too few timed step records (", step_times.size(),
                          ") for a step time; use more --steps");
    return false;
  }
  Clock::time_point last = released;
  int64_t delivered = 0;
  for (const auto& sub : subs) {
    last = std::max(last, sub->end());
    delivered += sub->events();
    run->heartbeats += sub->heartbeats();
    const bool ok =
        sub->status().ok() && sub->events() == run->job_events && sub->digest() == digest;
    if (!ok) {
      run->complete = false;
      if (run->errors++ == 0) {
        run->first_error = absl::StrCat("status ", Describe(sub->status()), ", ", sub->events(),
                                        " of ", run->job_events, " events",
                                        sub->digest() == digest ? "" : ", digest differs");
      }
    }
  }
  if (n > 0) {
    run->delivery_s = Seconds(last - released);
    run->lag_s = std::max(0.0, Seconds(last - ended));
    run->events_per_s = run->delivery_s > 0 ? delivered / run->delivery_s : 0;
  }
  subs.clear();
  s = CancelAndDelete(c.stub.get(), job.name());
  if (!s.ok()) {
    *error = "DeleteJob: " + Describe(s);
    return false;
  }
  return true;
}

std::string LayersText(const Options& o) {
  std::vector<int64_t> layers = {o.features};
  layers.insert(layers.end(), o.hidden.begin(), o.hidden.end());
  layers.push_back(10);
  return absl::StrJoin(layers, "-");
}

int RunStreams(Context& c) {
  const Options& o = *c.options;
  int64_t max_n = 0;
  for (int64_t n : o.subscribers) max_n = std::max(max_n, n);
  const int64_t channels = (max_n + o.streams_per_channel - 1) / o.streams_per_channel;
  std::vector<std::shared_ptr<grpc::Channel>> pool;
  std::vector<std::unique_ptr<v1::TrainingService::Stub>> stubs;
  for (int64_t i = 0; i < channels; ++i) {
    pool.push_back(OwnChannel(c.server->address(), static_cast<int>(i)));
    stubs.push_back(v1::TrainingService::NewStub(pool.back()));
  }
  // Order: a warmup run (dropped), then per round a baseline and every count,
  // ascending in even rounds and descending in odd ones, and a last baseline.
  std::vector<int64_t> order;
  for (int64_t r = 0; r < o.rounds; ++r) {
    order.push_back(0);
    std::vector<int64_t> counts = o.subscribers;
    if (r % 2 == 1) std::reverse(counts.begin(), counts.end());
    order.insert(order.end(), counts.begin(), counts.end());
  }
  order.push_back(0);
  std::string error;
  FanoutRun warmup;
  if (!RunFanout(c, stubs, 0, &warmup, &error)) {
    std::fprintf(stderr, "stream_fanout warmup: %s\n", error.c_str());
    return 1;
  }
  std::vector<FanoutRun> runs;
  int redone = 0;
  for (int64_t n : order) {
    FanoutRun run;
    for (int64_t attempt = 0;; ++attempt) {
      run = FanoutRun();
      if (!RunFanout(c, stubs, n, &run, &error)) {
        std::fprintf(stderr, "stream_fanout with %lld subscribers: %s\nampd log tail:\n%s\n",
                     static_cast<long long>(n), error.c_str(), c.server->LogTail().c_str());
        return 1;
      }
      const bool busy = run.foreign_cores > o.busy_cores;
      if (!o.json) {
        std::fprintf(
            stderr,
            "  run: %5lld subscribers  step %7.3f ms  compute %7.3f ms  other load %.2f "
            "cores  %s%s\n",
            static_cast<long long>(n), run.step_ms, run.compute_ms, run.foreign_cores,
            run.complete ? "complete" : "INCOMPLETE",
            busy ? (attempt < o.busy_retries ? "  (busy machine: again)" : "  (busy)") : "");
      }
      if (!busy || attempt >= o.busy_retries) break;
      ++redone;
    }
    runs.push_back(run);
  }
  std::vector<double> base_ms;
  for (const FanoutRun& r : runs) {
    if (r.subscribers == 0) base_ms.push_back(r.step_ms);
  }
  const double base = Median(base_ms);
  if (!o.json) {
    std::printf(
        "StreamMetrics fan-out: one job, MLP %s, 32-true, batch %lld, %lld steps, %lld events "
        "per stream;\n  median of %lld runs per count (baseline: %zu runs, interleaved); "
        "%lld streams per channel;\n  %d runs redone because other processes used > %.2f cores\n",
        LayersText(o).c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.steps),
        static_cast<long long>(runs.front().job_events), static_cast<long long>(o.rounds),
        base_ms.size(), static_cast<long long>(o.streams_per_channel), redone, o.busy_cores);
    std::printf("%11s %8s %9s %9s %9s %10s %10s %9s %9s %7s %9s %8s\n", "subscribers", "channels",
                "step ms", "min ms", "max ms", "compute ms", "outside ms", "slowdown", "events/s",
                "lag s", "other cpu", "complete");
  }
  std::vector<int64_t> counts = {0};
  counts.insert(counts.end(), o.subscribers.begin(), o.subscribers.end());
  bool all_complete = true;
  for (int64_t n : counts) {
    std::vector<double> ms, compute, outside, eps, delivery, lag, foreign;
    bool complete = true;
    int errors = 0, busy = 0;
    int64_t heartbeats = 0, job_events = 0;
    std::string first_error;
    for (const FanoutRun& r : runs) {
      if (r.subscribers != n) continue;
      ms.push_back(r.step_ms);
      compute.push_back(r.compute_ms);
      outside.push_back(std::max(0.0, r.step_ms - r.compute_ms));
      eps.push_back(r.events_per_s);
      delivery.push_back(r.delivery_s);
      lag.push_back(r.lag_s);
      foreign.push_back(r.foreign_cores);
      if (r.foreign_cores > o.busy_cores) ++busy;
      complete = complete && r.complete;
      if (errors == 0) first_error = r.first_error;
      errors += r.errors;
      heartbeats += r.heartbeats;
      job_events = r.job_events;
    }
    all_complete = all_complete && complete;
    const double med = Median(ms);
    const double slowdown = base > 0 ? (med / base - 1) * 100 : 0;
    const int64_t ch = n == 0 ? 0 : (n + o.streams_per_channel - 1) / o.streams_per_channel;
    const double mn = *std::min_element(ms.begin(), ms.end());
    const double mx = *std::max_element(ms.begin(), ms.end());
    if (o.json) {
      std::printf(
          "{\"bench\":\"stream_fanout\",\"subscribers\":%lld,\"channels\":%lld,\"steps\":%lld,"
          "\"events_per_subscriber\":%lld,\"events_per_s\":%.0f,\"delivery_s\":%.3f,"
          "\"lag_s\":%.3f,\"step_ms\":%.4f,\"step_ms_min\":%.4f,\"step_ms_max\":%.4f,"
          "\"compute_ms\":%.4f,\"outside_step_ms\":%.4f,\"slowdown_pct\":%.2f,\"complete\":%s,"
          "\"errors\":%d,"
          "\"heartbeats\":%lld,\"runs\":%zu,\"foreign_cores\":%.3f,\"busy_runs\":%d}\n",
          static_cast<long long>(n), static_cast<long long>(ch), static_cast<long long>(o.steps),
          static_cast<long long>(job_events), Median(eps), Median(delivery), Median(lag), med, mn,
          mx, Median(compute), Median(outside), n == 0 ? 0.0 : slowdown,
          complete ? "true" : "false", errors, static_cast<long long>(heartbeats), ms.size(),
          Median(foreign), busy);
    } else {
      const std::string sd = n == 0 ? "-" : absl::StrFormat("%+.1f %%", slowdown);
      const std::string rate = n == 0 ? "-" : absl::StrFormat("%.0f", Median(eps));
      const std::string lag_text = n == 0 ? "-" : absl::StrFormat("%.1f", Median(lag));
      std::printf("%11lld %8lld %9.3f %9.3f %9.3f %10.3f %10.3f %9s %9s %7s %9.2f %8s\n",
                  static_cast<long long>(n), static_cast<long long>(ch), med, mn, mx,
                  Median(compute), Median(outside), sd.c_str(), rate.c_str(), lag_text.c_str(),
                  Median(foreign), n == 0 ? "-" : (complete ? "yes" : "NO"));
    }
    if (!complete) {
      std::fprintf(stderr, "%lld subscribers: %d incomplete streams, first: %s\n",
                   static_cast<long long>(n), errors, first_error.c_str());
    }
  }
  if (!o.json) std::printf("\n");
  std::fflush(stdout);
  return all_complete ? 0 : 1;
}

// `ampd --helpfull`: which flags this ampd has.
std::string AmpdHelp(const std::string& binary) {
  std::string out;
  FILE* p = popen(absl::StrCat("'", binary, "' --helpfull 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buffer[4096];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof(buffer), p)) > 0) out.append(buffer, got);
  pclose(p);
  return out;
}

// The 1-minute load average: other work on the machine skews every number.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "null" : one;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage("The ampd server benchmark (bench/README.md)");
  absl::ParseCommandLine(argc, argv);
  Options o;
  if (!ReadFlags(&o)) return 2;
  const std::string binary = o.ampd.empty() ? testing::Runfile("server/ampd") : o.ampd;
  if (access(binary.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "cannot run the ampd binary %s; pass --ampd=PATH\n", binary.c_str());
    return 2;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/ampd_bench_XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp %s: %s\n", templ.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string dir = templ;
  int rc = 0;
  {
    // Heartbeats only go to streams of queued jobs; an hour keeps them out of
    // the event counts. The queue must hold every CreateJob of the benchmark.
    const int64_t max_queued = o.create_calls + 100 * o.create_threads + 100;
    int64_t max_streams = 0;
    for (int64_t n : o.subscribers) max_streams = std::max(max_streams, n);
    std::vector<std::string> flags = {"--heartbeat_interval_ms=3600000",
                                      absl::StrCat("--max_queued_jobs=", max_queued),
                                      "--shutdown_grace_ms=2000"};
    // Per-caller limits, in ampd versions that have them (every client of
    // this benchmark is the same caller).
    const std::string help = AmpdHelp(binary);
    if (help.find("max_queued_jobs_per_principal") != std::string::npos) {
      flags.push_back(absl::StrCat("--max_queued_jobs_per_principal=", max_queued));
    }
    if (help.find("max_streams_per_principal") != std::string::npos) {
      flags.push_back(absl::StrCat("--max_streams_per_principal=", max_streams + 100));
    }
    flags.insert(flags.end(), o.ampd_flags.begin(), o.ampd_flags.end());
    testing::AmpdOptions start;
    start.binary = binary;
    start.data_dir = dir;
    start.flags = flags;
    start.start_timeout = std::chrono::seconds(60);
    if (o.omp_threads > 0) start.env["OMP_NUM_THREADS"] = absl::StrCat(o.omp_threads);
    std::unique_ptr<testing::AmpdProcess> started = testing::AmpdProcess::Start(start);
    if (!started->ok()) {
      std::fprintf(stderr, "%s\n", started->error().c_str());
      std::filesystem::remove_all(dir);
      return 1;
    }
    testing::AmpdProcess& server = *started;
    Context c;
    c.options = &o;
    c.server = &server;
    c.dir = dir;
    c.channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
    c.stub = v1::TrainingService::NewStub(c.channel);
    if (o.json) {
      std::printf(
          "{\"bench\":\"meta\",\"grpc\":\"%s\",\"hardware_threads\":%u,\"ampd\":\"%s\","
          "\"port\":%d,\"omp_threads\":%lld,\"loadavg_1m\":%s}\n",
          grpc::Version().c_str(), std::thread::hardware_concurrency(), binary.c_str(),
          server.port(), static_cast<long long>(o.omp_threads), LoadAverage().c_str());
    } else {
      std::printf(
          "ampd %s on %s; gRPC %s; %u hardware threads (server and clients share them);\n"
          "OMP_NUM_THREADS for ampd: %s; load average (1 min) at start: %s\n\n",
          binary.c_str(), server.address().c_str(), grpc::Version().c_str(),
          std::thread::hardware_concurrency(),
          o.omp_threads > 0 ? std::to_string(o.omp_threads).c_str() : "inherited",
          LoadAverage().c_str());
    }
    std::fflush(stdout);
    if (o.unary) {
      rc = RunGetJob(c);
      if (rc == 0) rc = RunCreateJob(c);
    }
    if (rc == 0 && o.streams) rc = RunStreams(c);
    const int exit_code = server.Stop();
    if (exit_code != 0) {
      std::fprintf(stderr, "ampd exited with %d; log tail:\n%s\n", exit_code,
                   server.LogTail().c_str());
      if (rc == 0) rc = 1;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}

}  // namespace
}  // namespace ampd::bench

int main(int argc, char** argv) { return ampd::bench::Main(argc, argv); }
