#include "server/agent_main.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ampd/v1/agent_service.grpc.pb.h"
#include "engine/data/dataset.h"
#include "engine/data/text_tokens.h"
#include "engine/dist/launcher_env.h"
#include "engine/io/atomic_file.h"
#include "engine/io/sha256.h"
#include "server/agents/grpc_store.h"
#include "server/jobs/job_runner.h"
#include "server/jobs/local_workers.h"
#include "server/jobs/run_outputs.h"

namespace ampd::server {
namespace {

namespace v1 = ::ampd::v1;

struct AgentFlags {
  std::string server, name, data_dir = "./ampd-agent-data", token;
  agents::AgentTls tls;
  std::string worker_host = "127.0.0.1";
  std::string fashion_mnist_dir = engine::data::kFashionMnistDir;
  std::string fortunes_dir = engine::data::kFortunesDir;
  int slots = 1;
  int64_t reconnect_ms = 2000;
  // --join: the job this agent's one rank belongs to, its place from the
  // launcher's environment.
  std::string join;
  int join_rank = 0, join_world = 0;
};

void Say(const std::string& line) {
  std::printf("ampd agent: %s\n", line.c_str());
  std::fflush(stdout);
}

class Agent {
 public:
  Agent(AgentFlags flags, std::shared_ptr<grpc::Channel> channel)
      : f_(std::move(flags)), stub_(v1::AgentService::NewStub(channel)) {
    std::error_code ec;
    binary_ = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  }

  // One session; returns how it ended.
  grpc::Status Session() {
    grpc::ClientContext ctx;
    agents::Authorize(&ctx, f_.token);
    v1::AgentHello hello;
    hello.set_name(f_.name);
    hello.set_slots(f_.slots);
    hello.set_device_kind("cpu");
    if (!f_.join.empty()) {
      hello.set_job(f_.join);
      hello.set_rank(f_.join_rank);
      hello.set_world_size(f_.join_world);
    }
    std::unique_ptr<grpc::ClientReader<v1::AgentWork>> reader = stub_->Connect(&ctx, hello);
    v1::AgentWork work;
    while (reader->Read(&work)) {
      if (work.has_start()) {
        Start(work.start());
      } else if (work.has_stop()) {
        Stop(work.stop().job(), work.stop().attempt());
      } else if (!work.registered().empty()) {
        Say(absl::StrCat("registered with ", f_.server, " as \"", work.registered(), "\", ",
                         f_.slots, f_.slots == 1 ? " slot" : " slots"));
      }
    }
    grpc::Status s = reader->Finish();
    StopAll();
    return s;
  }

 private:
  using Key = std::pair<std::string, int64_t>;  // job, attempt

  void Report(const std::string& job, int64_t attempt, int rank, bool lost,
              const std::string& reason) {
    grpc::ClientContext ctx;
    agents::Authorize(&ctx, f_.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::WorkerReport r;
    r.set_agent(f_.name);
    r.set_job(job);
    r.set_attempt(attempt);
    r.set_rank(rank);
    r.set_lost(lost);
    r.set_reason(reason);
    google::protobuf::Empty out;
    (void)stub_->ReportWorker(&ctx, r, &out);  // the session's end says the rest
    Say(absl::StrCat("job ", job, " attempt ", attempt, ": ", reason));
  }

  // The job's checkpoint of `step`, into this machine's data dir where the
  // worker looks for it.
  absl::Status FetchCheckpoint(const std::string& job, int64_t step) {
    const std::string dir = jobs::CheckpointDir(f_.data_dir, job);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
    grpc::ClientContext ctx;
    agents::Authorize(&ctx, f_.token);
    v1::FetchCheckpointRequest req;
    req.set_job(job);
    req.set_step(step);
    std::unique_ptr<grpc::ClientReader<v1::CheckpointChunk>> reader =
        stub_->FetchCheckpoint(&ctx, req);
    v1::CheckpointChunk chunk;
    std::string name, data, sha;
    while (reader->Read(&chunk)) {
      if (!chunk.file_name().empty()) name = chunk.file_name();
      if (!chunk.sha256().empty()) sha = chunk.sha256();
      data += chunk.data();
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("fetching the checkpoint of step ", step, ": ", s.error_message()));
    }
    if (name.empty() || name.find('/') != std::string::npos) {
      return absl::InternalError("the server sent a checkpoint without a file name");
    }
    engine::io::Sha256 received;
    received.Update(data);
    if (received.FinishHex() != sha) {
      return absl::DataLossError(
          absl::StrCat("the checkpoint of step ", step, " arrived damaged (SHA-256 mismatch)"));
    }
    // The file and its checksum sidecar, as the server keeps them.
    if (absl::Status w = engine::io::WriteFileAtomically(dir + "/" + name, data); !w.ok()) return w;
    return engine::io::WriteFileAtomically(dir + "/" + name + ".sha256", sha + "\n");
  }

  // The files the job's spec names, into DATA_DIR/data/SHA256 unless held
  // there already (by content, so a data set is fetched once for every job
  // that reads it), and the map the ranks resolve the spec's paths through:
  // lines "PATH<TAB>LOCAL FILE" in `map_path`.
  absl::Status FetchDataFiles(const v1::StartRanks& s, const std::string& map_path) {
    const std::string dir = f_.data_dir + "/data";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
    std::string map;
    for (const v1::DataFile& f : s.data_files()) {
      if (f.sha256().size() != 64 ||
          f.sha256().find_first_not_of("0123456789abcdef") != std::string::npos ||
          f.path().find_first_of("\t\n") != std::string::npos) {
        return absl::InternalError(
            absl::StrCat("the server sent a bad data file entry for ", f.path()));
      }
      const std::string local = dir + "/" + f.sha256();
      const auto size = std::filesystem::file_size(local, ec);
      if (ec || static_cast<int64_t>(size) != f.size_bytes()) {
        if (absl::Status got = FetchDataFile(s.job(), f, local); !got.ok()) return got;
        Say(absl::StrCat("job ", s.job(), ": fetched ", f.path(), " (", f.size_bytes(), " bytes)"));
      }
      absl::StrAppend(&map, f.path(), "\t", local, "\n");
    }
    return engine::io::WriteFileAtomically(map_path, map);
  }

  absl::Status FetchDataFile(const std::string& job, const v1::DataFile& f,
                             const std::string& local) {
    const std::string partial = absl::StrCat(local, ".partial-", getpid());
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", partial));
    grpc::ClientContext ctx;
    agents::Authorize(&ctx, f_.token);
    v1::FetchDataFileRequest req;
    req.set_job(job);
    req.set_path(f.path());
    std::unique_ptr<grpc::ClientReader<v1::DataFileChunk>> reader = stub_->FetchDataFile(&ctx, req);
    engine::io::Sha256 received;
    std::string sent_sha;
    v1::DataFileChunk chunk;
    while (reader->Read(&chunk)) {
      out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
      received.Update(chunk.data());
      if (!chunk.sha256().empty()) sent_sha = chunk.sha256();
    }
    grpc::Status st = reader->Finish();
    out.close();
    auto fail = [&](absl::Status why) {
      std::error_code ec;
      std::filesystem::remove(partial, ec);
      return why;
    };
    if (!st.ok()) {
      return fail(absl::UnavailableError(
          absl::StrCat("fetching ", f.path(), " from the server: ", st.error_message())));
    }
    if (!out) return fail(absl::InternalError(absl::StrCat("writing ", partial, " failed")));
    const std::string got = received.FinishHex();
    if (got != sent_sha) {
      return fail(
          absl::DataLossError(absl::StrCat(f.path(), " arrived damaged (SHA-256 mismatch)")));
    }
    if (got != f.sha256()) {
      return fail(absl::FailedPreconditionError(
          absl::StrCat(f.path(), " changed on the server after the job's ranks were placed")));
    }
    std::error_code ec;
    std::filesystem::rename(partial, local, ec);
    if (ec)
      return fail(absl::InternalError(absl::StrCat("cannot rename ", partial, ": ", ec.message())));
    return absl::OkStatus();
  }

  void Start(const v1::StartRanks& s) {
    const std::string dir = jobs::WorkersDir(f_.data_dir, s.job());
    auto fail = [&](const std::string& why) {
      for (int rank : s.ranks()) {
        Report(s.job(), s.attempt(), rank, true,
               absl::StrCat("worker ", rank, " could not start on agent ", f_.name, ": ", why));
      }
    };
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir, ec);
    if (ec) return fail(absl::StrCat("cannot create ", dir, ": ", ec.message()));
    if (absl::Status w = engine::io::WriteFileAtomically(dir + "/spec.json", s.spec_json());
        !w.ok()) {
      return fail(std::string(w.message()));
    }
    if (s.resume_step() > 0) {
      if (absl::Status c = FetchCheckpoint(s.job(), s.resume_step()); !c.ok()) {
        return fail(std::string(c.message()));
      }
    }
    if (absl::Status d = FetchDataFiles(s, dir + "/data_files.tsv"); !d.ok()) {
      return fail(std::string(d.message()));
    }
    jobs::LocalWorkers::Options o;
    o.binary = binary_;
    o.log_dir = dir;
    o.world_size = s.world_size();
    o.ranks.assign(s.ranks().begin(), s.ranks().end());
    o.args = {"--spec=" + dir + "/spec.json",
              "--job=" + s.job(),
              absl::StrCat("--world_size=", s.world_size()),
              "--store_server=" + f_.server,
              absl::StrCat("--attempt=", s.attempt()),
              "--data_root=" + f_.data_dir,
              "--fashion_mnist_dir=" + f_.fashion_mnist_dir,
              "--fortunes_dir=" + f_.fortunes_dir,
              "--owner=" + s.owner(),
              "--hostname=" + f_.worker_host,
              absl::StrCat("--resume_step=", s.resume_step()),
              absl::StrCat("--parent_pid=", getpid()),
              absl::StrCat("--timeout_ms=", s.timeout_ms()),
              "--data_files=" + dir + "/data_files.tsv"};
    if (!f_.tls.ca.empty()) o.args.push_back("--tls_ca=" + f_.tls.ca);
    if (!f_.tls.cert.empty()) {
      o.args.push_back("--tls_cert=" + f_.tls.cert);
      o.args.push_back("--tls_key=" + f_.tls.key);
    }
    o.env.push_back("AMPD_TOKEN=" + f_.token);
    if (std::getenv("OMP_NUM_THREADS") == nullptr) {
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      o.env.push_back(absl::StrCat("OMP_NUM_THREADS=", std::max(1, cores / f_.slots)));
    }
    o.on_exit = [this, job = s.job(), attempt = s.attempt()](int rank, bool lost,
                                                             const std::string& why) {
      Report(job, attempt, rank, lost, why);
    };
    absl::StatusOr<std::unique_ptr<jobs::LocalWorkers>> started =
        jobs::LocalWorkers::Start(std::move(o));
    if (!started.ok()) return fail(std::string(started.status().message()));
    Say(absl::StrCat("job ", s.job(), " attempt ", s.attempt(), ": ", (*started)->Where(),
                     s.resume_step() > 0 ? absl::StrCat(", resuming at step ", s.resume_step())
                                         : std::string()));
    std::lock_guard<std::mutex> lock(mu_);
    running_[{s.job(), s.attempt()}] = *std::move(started);
  }

  void Stop(const std::string& job, int64_t attempt) {
    std::unique_ptr<jobs::LocalWorkers> w;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = running_.find({job, attempt});
      if (it == running_.end()) return;
      w = std::move(it->second);
      running_.erase(it);
    }
    w.reset();  // kills and reaps what still runs
  }

  void StopAll() {
    std::map<Key, std::unique_ptr<jobs::LocalWorkers>> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all.swap(running_);
    }
    if (!all.empty()) Say(absl::StrCat("stopping ", all.size(), " job attempt(s)"));
  }

  AgentFlags f_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
  std::string binary_;
  std::mutex mu_;
  std::map<Key, std::unique_ptr<jobs::LocalWorkers>> running_;
};

bool Permanent(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED ||
         code == grpc::StatusCode::INVALID_ARGUMENT || code == grpc::StatusCode::ALREADY_EXISTS ||
         code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::FAILED_PRECONDITION ||
         code == grpc::StatusCode::UNIMPLEMENTED;
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    default:
      return "error";
  }
}

}  // namespace

int AgentMain(int argc, char** argv) {
  AgentFlags f;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) f.name = host;
  if (const char* t = std::getenv("AMPD_TOKEN")) f.token = t;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "ampd agent: unexpected argument %s (see server/agent_main.h)\n",
                   a.c_str());
      return 2;
    }
    const std::string key = a.substr(2, eq - 2), value = a.substr(eq + 1);
    std::map<std::string, std::string*> strings = {{"server", &f.server},
                                                   {"name", &f.name},
                                                   {"data_dir", &f.data_dir},
                                                   {"token", &f.token},
                                                   {"tls_ca", &f.tls.ca},
                                                   {"tls_cert", &f.tls.cert},
                                                   {"tls_key", &f.tls.key},
                                                   {"worker_host", &f.worker_host},
                                                   {"fashion_mnist_dir", &f.fashion_mnist_dir},
                                                   {"fortunes_dir", &f.fortunes_dir},
                                                   {"join", &f.join}};
    if (auto it = strings.find(key); it != strings.end()) {
      *it->second = value;
    } else if (key == "slots") {
      if (!absl::SimpleAtoi(value, &f.slots) || f.slots < 1) {
        std::fprintf(stderr, "ampd agent: --slots must be a number >= 1\n");
        return 2;
      }
    } else if (key == "reconnect_ms") {
      if (!absl::SimpleAtoi(value, &f.reconnect_ms) || f.reconnect_ms < 0) {
        std::fprintf(stderr, "ampd agent: --reconnect_ms must be a number >= 0\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "ampd agent: unknown flag --%s (see server/agent_main.h)\n",
                   key.c_str());
      return 2;
    }
  }
  bool named = false, reconnect_set = false;
  for (int i = 1; i < argc; ++i) {
    named |= std::strncmp(argv[i], "--name=", 7) == 0;
    reconnect_set |= std::strncmp(argv[i], "--reconnect_ms=", 15) == 0;
  }
  if (f.server.empty()) {
    std::fprintf(stderr, "ampd agent: --server=HOST:PORT is required\n");
    return 2;
  }
  if (!f.join.empty()) {
    // Started by srun, mpirun or a Kubernetes indexed Job for one job: task
    // t of T is the job's rank t + 1 of T + 1 (rank 0 trains in ampd).
    absl::StatusOr<engine::dist::WorldPlace> place =
        engine::dist::PlaceFromEnvironment([](const char* name) { return std::getenv(name); });
    if (!place.ok()) {
      std::fprintf(stderr,
                   "ampd agent: --join needs its place from the launcher's environment "
                   "(SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE, "
                   "JOB_COMPLETION_INDEX with AMPD_WORLD_SIZE, or AMPD_RANK/AMPD_WORLD_SIZE): "
                   "%s\n",
                   std::string(place.status().message()).c_str());
      return 2;
    }
    f.join_rank = place->rank + 1;
    f.join_world = place->size + 1;
    f.slots = 1;
    if (!named) f.name = absl::StrCat(f.join, "/rank-", f.join_rank);
    if (!reconnect_set) f.reconnect_ms = 0;  // the launcher restarts it if it should
    Say(absl::StrCat("joining ", f.join, " as rank ", f.join_rank, " of ", f.join_world, " (",
                     place->source, ")"));
  }
  std::error_code ec;
  std::filesystem::create_directories(f.data_dir, ec);
  if (ec) {
    std::fprintf(stderr, "ampd agent: cannot create --data_dir=%s: %s\n", f.data_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  f.data_dir = std::filesystem::absolute(f.data_dir).string();
  for (std::string* pem : {&f.tls.ca, &f.tls.cert, &f.tls.key}) {
    if (!pem->empty()) *pem = std::filesystem::absolute(*pem).string();  // for the workers too
  }
  std::string error;
  std::shared_ptr<grpc::Channel> channel = agents::AgentChannel(f.server, f.tls, &error);
  if (!channel) {
    std::fprintf(stderr, "ampd agent: %s\n", error.c_str());
    return 2;
  }
  const int64_t reconnect_ms = f.reconnect_ms;
  Agent agent(f, channel);
  while (true) {
    const grpc::Status s = agent.Session();
    if (!f.join.empty() && s.ok()) {
      Say(absl::StrCat(f.join, " has ended"));
      return 0;
    }
    if (Permanent(s.error_code())) {
      std::fprintf(stderr, "ampd agent: the server refused this agent: %s: %s\n",
                   CodeName(s.error_code()), s.error_message().c_str());
      return 1;
    }
    if (reconnect_ms == 0) {
      Say(absl::StrCat("the connection ended (", CodeName(s.error_code()), ": ", s.error_message(),
                       ")"));
      return s.ok() ? 0 : 1;
    }
    Say(absl::StrCat("the connection ended (", s.ok() ? "OK" : CodeName(s.error_code()),
                     s.error_message().empty() ? "" : ": " + s.error_message(),
                     "); connecting again in ", reconnect_ms, " ms"));
    std::this_thread::sleep_for(std::chrono::milliseconds(reconnect_ms));
  }
}

}  // namespace ampd::server
