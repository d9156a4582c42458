// ampd: the training server.
//   ampd --listen=127.0.0.1:50051 --data_dir=./ampd-data
#include <sched.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/cpu/host_memory.h"
#include "server/agent_main.h"
#include "server/log.h"
#include "server/server.h"
#include "server/worker_main.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "HOST:PORT to listen on (port 0 picks a free port). Loopback by default.");
ABSL_FLAG(std::string, data_dir, "./ampd-data", "Directory for the server's data (data root).");
ABSL_FLAG(std::string, fashion_mnist_dir, "/usr/share/datasets/fashion-mnist",
          "Where the built-in fashion-mnist data set lives.");
ABSL_FLAG(int, max_queued_jobs, 1000, "Queued jobs beyond this are refused (RESOURCE_EXHAUSTED).");
ABSL_FLAG(int64_t, max_model_parameters, 500000000, "Largest model a job may train.");
ABSL_FLAG(int, cpu_workers, 1,
          "Worker slots: jobs trained at once on the CPU; a data-parallel job "
          "(resources.workers: N) takes N of them at once, as N processes.");
ABSL_FLAG(std::string, worker_host, "127.0.0.1",
          "The address this server's data-parallel ranks listen on for their peers: the "
          "loopback serves its own workers; give one that agents' machines reach.");
ABSL_FLAG(int, heartbeat_interval_ms, 2000, "Heartbeats to streams of queued jobs.");
ABSL_FLAG(int, shutdown_grace_ms, 5000, "How long shutdown waits for clients to finish reading.");
ABSL_FLAG(int64_t, checkpoint_every_steps, 500, "Checkpoint running jobs every N steps (0: off).");
ABSL_FLAG(int, checkpoint_every_seconds, 60, "Checkpoint running jobs every N seconds (0: off).");
ABSL_FLAG(int, keep_checkpoints, 3, "Checkpoints kept per job (newest).");
ABSL_FLAG(double, retain_terminal_jobs_days, 0,
          "Remove ended jobs (history, checkpoints, weights, TensorBoard files) this many days "
          "after they ended (0: keep them).");
ABSL_FLAG(int, max_terminal_jobs, 0,
          "Keep at most this many ended jobs, removing the oldest first (0: no limit).");
ABSL_FLAG(int64_t, ended_job_cache_mib, 16,
          "Memory for ended jobs' records and history pages read back from the store (an LRU "
          "cache; ended jobs themselves live in the store, not in memory).");
ABSL_FLAG(int64_t, max_upload_bytes, 1LL << 30, "Largest data set UploadDataset accepts.");
ABSL_FLAG(int64_t, upload_quota_bytes_per_principal, 10LL << 30,
          "Total size of the data sets one principal may have uploaded.");
ABSL_FLAG(int, max_message_bytes, 16 << 20, "Largest gRPC message accepted or sent.");
ABSL_FLAG(int, max_queued_jobs_per_principal, 100, "Queued jobs one principal may have.");
ABSL_FLAG(int64_t, max_job_memory_bytes, 16LL << 30,
          "Largest memory estimate (weights, optimizer state, activations) a job may have.");
ABSL_FLAG(int, max_generations, 2,
          "Generate calls run at once, server-wide (each on a thread of its own, beside the "
          "training workers); more are RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_streams_per_principal, 10000,
          "Open StreamMetrics calls one principal may have.");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate (chain); with --tls_key enables TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require and verify client certificates (mTLS). Without "
          "--tokens_file the certificate's CN (else SAN) is the caller's identity.");
ABSL_FLAG(std::string, client_cert_roles, "",
          "With --tls_client_ca (and no --tokens_file): lines \"IDENTITY user|admin|agent\" "
          "('#' comments) giving certificate identities their role; unlisted ones are users.");
ABSL_FLAG(bool, insecure, false,
          "Allow plaintext (no TLS) on a non-loopback --listen address (otherwise refused).");
ABSL_FLAG(
    std::string, tokens_file, "",
    "Bearer-token file, lines \"SHA256HEX_OF_TOKEN PRINCIPAL user|admin|agent\" ('#' comments). "
    "Every RPC except health and reflection then needs \"authorization: Bearer TOKEN\".");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Prometheus metrics at http://HOST:PORT/metrics (\"\": off; port 0 picks one). "
          "Loopback unless --insecure.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the metrics port is written here once serving.");
ABSL_FLAG(std::string, training_cpus, "",
          "CPUs for the training workers and their OpenMP threads, e.g. 0 or 0-3 (\"\": any).");
ABSL_FLAG(std::string, server_cpus, "",
          "CPUs for everything else: gRPC, streams, persistence (\"\": any).");
ABSL_FLAG(std::string, port_file, "", "If set, the chosen port is written here once listening.");

namespace {

// "0,2-3" -> {0, 2, 3}; "" -> {}. False on anything else.
bool ParseCpus(const std::string& text, std::vector<int>* cpus) {
  cpus->clear();
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int lo = 0, hi = 0;
    if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &lo) || !absl::SimpleAtoi(ends.back(), &hi) ||
        lo < 0 || hi < lo || hi >= CPU_SETSIZE) {
      return false;
    }
    for (int c = lo; c <= hi; ++c) cpus->push_back(c);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // ampd, its workers and its agents' workers train: freed activations stay
  // mapped for the next step (engine/cpu/host_memory.h); each job's end
  // gives them back.
  ampd::engine::cpu::KeepHostMemoryMapped();
  // A data-parallel job's rank 1..N-1, started by a server (worker_main.h).
  if (argc > 1 && std::strcmp(argv[1], "worker") == 0) {
    return ampd::server::WorkerMain(argc - 1, argv + 1);
  }
  // Worker slots of another machine, lent to a server (agent_main.h).
  if (argc > 1 && std::strcmp(argv[1], "agent") == 0) {
    return ampd::server::AgentMain(argc - 1, argv + 1);
  }
  absl::SetProgramUsageMessage(
      "ampd: a training server with automatic mixed precision.\n"
      "  ampd --listen=127.0.0.1:50051 --data_dir=./ampd-data\n"
      "  ampd agent --server=HOST:PORT --slots=N   (lends this machine's worker slots;\n"
      "  see server/agent_main.h)\n"
      "(`ampd worker ...` is a data-parallel job's rank that ampd starts itself;\n"
      "see server/worker_main.h.)");
  // --help lists this file's flags (absl matches the program name otherwise).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);

  // Signals are taken by one thread with sigwait, so shutdown runs as
  // ordinary code rather than inside a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ampd::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.jobs.data_root = absl::GetFlag(FLAGS_data_dir);
  options.jobs.fashion_mnist_dir = absl::GetFlag(FLAGS_fashion_mnist_dir);
  options.jobs.max_queued_jobs = absl::GetFlag(FLAGS_max_queued_jobs);
  options.jobs.max_model_parameters = absl::GetFlag(FLAGS_max_model_parameters);
  options.jobs.cpu_workers = absl::GetFlag(FLAGS_cpu_workers);
  options.jobs.worker_host = absl::GetFlag(FLAGS_worker_host);
  {
    // Ranks 1..N-1 of data-parallel jobs run as this binary's `worker` mode.
    std::error_code ec;
    options.jobs.worker_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  }
  options.heartbeat_interval_ms = absl::GetFlag(FLAGS_heartbeat_interval_ms);
  options.jobs.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  options.jobs.checkpoint_every_seconds = absl::GetFlag(FLAGS_checkpoint_every_seconds);
  options.jobs.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  options.jobs.retain_terminal_jobs_days = absl::GetFlag(FLAGS_retain_terminal_jobs_days);
  options.jobs.max_terminal_jobs = absl::GetFlag(FLAGS_max_terminal_jobs);
  if (absl::GetFlag(FLAGS_ended_job_cache_mib) < 0) {
    ampd::server::LogError("--ended_job_cache_mib must be >= 0");
    return 1;
  }
  options.jobs.ended_job_cache_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_ended_job_cache_mib))
                                       << 20;
  if (options.jobs.retain_terminal_jobs_days < 0 || options.jobs.max_terminal_jobs < 0) {
    ampd::server::LogError("--retain_terminal_jobs_days and --max_terminal_jobs must be >= 0");
    return 1;
  }
  options.max_upload_bytes = absl::GetFlag(FLAGS_max_upload_bytes);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.upload_quota_bytes_per_principal = absl::GetFlag(FLAGS_upload_quota_bytes_per_principal);
  options.max_streams_per_principal = absl::GetFlag(FLAGS_max_streams_per_principal);
  options.max_generations = absl::GetFlag(FLAGS_max_generations);
  options.jobs.max_queued_jobs_per_principal = absl::GetFlag(FLAGS_max_queued_jobs_per_principal);
  options.jobs.max_job_memory_bytes = absl::GetFlag(FLAGS_max_job_memory_bytes);
  options.shutdown_grace_ms = absl::GetFlag(FLAGS_shutdown_grace_ms);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.client_cert_roles = absl::GetFlag(FLAGS_client_cert_roles);
  options.insecure = absl::GetFlag(FLAGS_insecure);
  options.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  std::vector<int> server_cpus;
  if (!ParseCpus(absl::GetFlag(FLAGS_training_cpus), &options.jobs.training_cpus) ||
      !ParseCpus(absl::GetFlag(FLAGS_server_cpus), &server_cpus)) {
    ampd::server::LogError(
        "--training_cpus / --server_cpus: expected CPU numbers or ranges (0,2-3)");
    return 1;
  }
  if (!server_cpus.empty()) {
    // The main thread's set, inherited by every thread started from here on
    // (gRPC's, the persister's); the training workers then set their own.
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : server_cpus) CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      ampd::server::LogError("--server_cpus: cannot pin", {{"error", std::strerror(errno)}});
      return 1;
    }
  }
  // The default port may be another ampd's: then a warning, not an exit.
  options.metrics_required = false;
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--metrics_listen")) options.metrics_required = true;
  }
  std::error_code ec;
  std::filesystem::create_directories(options.jobs.data_root, ec);
  if (ec) {
    ampd::server::LogError("cannot create data_dir",
                           {{"data_dir", options.jobs.data_root}, {"error", ec.message()}});
    return 1;
  }
  auto server = ampd::server::AmpdServer::Start(options);
  if (!server.ok()) {
    ampd::server::LogError(std::string(server.status().message()));
    return 1;
  }
  auto write_port = [](const std::string& path, int port) {
    if (path.empty()) return;
    std::ofstream out(path + ".tmp");
    out << port << "\n";
    out.close();
    std::rename((path + ".tmp").c_str(), path.c_str());
  };
  // The metrics port first: a test that sees the gRPC port file can scrape.
  if ((*server)->metrics_port() > 0) {
    write_port(absl::GetFlag(FLAGS_metrics_port_file), (*server)->metrics_port());
  }
  write_port(absl::GetFlag(FLAGS_port_file), (*server)->port());
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    ampd::server::LogInfo("signal received", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    (*server)->Shutdown();
  });
  (*server)->Wait();
  // Wait() returns only after Shutdown() (from the signal thread).
  signal_thread.join();
  return 0;
}
