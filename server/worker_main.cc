#include "server/worker_main.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/dist/nccl_connector.h"
#include "engine/dist/process_group.h"
#include "engine/io/checkpoint.h"
#include "engine/nn/model.h"
#include "engine/runner/job_spec.h"
#include "engine/train/trainer.h"
#include "server/agents/grpc_store.h"
#include "server/jobs/run_outputs.h"
#include "server/uploads.h"

namespace ampd::server {
namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "ampd worker: %s\n", what.c_str());
  return 1;
}

}  // namespace

int WorkerMain(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "ampd worker: unexpected argument %s (see server/worker_main.h)\n",
                   a.c_str());
      return 2;
    }
    flags[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  // Ranks of the server's own machine meet in a directory; an agent's reach
  // the job's store through the server.
  const char* meet = flags.count("store_server") ? "store_server" : "rendezvous";
  for (const char* required :
       {"spec", "job", "rank", "world_size", meet, "data_root", "fashion_mnist_dir"}) {
    if (!flags.count(required)) {
      std::fprintf(stderr, "ampd worker: --%s is required\n", required);
      return 2;
    }
  }
  int rank = 0, world_size = 0, parent = 0;
  int64_t resume_step = 0, timeout_ms = 30000, attempt = 0;
  if (!absl::SimpleAtoi(flags["rank"], &rank) ||
      !absl::SimpleAtoi(flags["world_size"], &world_size) || rank < 1 || rank >= world_size ||
      (flags.count("resume_step") && !absl::SimpleAtoi(flags["resume_step"], &resume_step)) ||
      (flags.count("timeout_ms") && !absl::SimpleAtoi(flags["timeout_ms"], &timeout_ms)) ||
      (flags.count("parent_pid") && !absl::SimpleAtoi(flags["parent_pid"], &parent)) ||
      (flags.count("attempt") && !absl::SimpleAtoi(flags["attempt"], &attempt))) {
    std::fprintf(stderr,
                 "ampd worker: bad "
                 "--rank/--world_size/--resume_step/--timeout_ms/--parent_pid/--attempt\n");
    return 2;
  }
  // Die with the server; if it is already gone, do not start.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent > 0 && getppid() != parent) return Fail("the server that started this worker is gone");

  namespace runner = engine::runner;
  absl::StatusOr<ampd::v1::JobSpec> spec = runner::ReadJobSpecFile(flags["spec"]);
  if (!spec.ok()) return Fail(std::string(spec.status().message()));
  runner::JobSpecContext context;
  context.data_root = flags["data_root"];
  context.fashion_mnist_dir = flags["fashion_mnist_dir"];
  if (flags.count("fortunes_dir")) context.fortunes_dir = flags["fortunes_dir"];
  const std::string owner = flags["owner"];
  std::map<std::string, std::string> fetched;  // spec path -> local copy (an agent's)
  if (flags.count("data_files")) {
    std::ifstream in(flags["data_files"]);
    if (!in) return Fail("cannot read --data_files " + flags["data_files"]);
    for (std::string line; std::getline(in, line);) {
      const size_t tab = line.find('\t');
      if (tab == std::string::npos) return Fail("a bad line in " + flags["data_files"]);
      fetched[line.substr(0, tab)] = line.substr(tab + 1);
    }
  }
  context.resolve_data_path = [&](const std::string& p) {
    auto it = fetched.find(p);
    return it != fetched.end() ? it->second : ResolveDataPath(context.data_root, owner, p);
  };
  absl::StatusOr<runner::ResolvedJob> job = runner::ResolveJobSpec(*spec, context);
  if (!job.ok()) return Fail(std::string(job.status().message()));
  engine::train::TrainerConfig& config = job->config;

  // The state rank 0 resumes from: the job's checkpoint of that step.
  std::optional<engine::train::TrainerState> resume;
  if (resume_step > 0) {
    std::vector<std::string> warnings;
    std::optional<engine::io::LoadedCheckpoint> c = engine::io::LoadLatestCheckpoint(
        jobs::CheckpointDir(context.data_root, flags["job"]), &warnings);
    if (!c || c->state.step != resume_step) {
      return Fail(absl::StrCat(
          "the job's checkpoint of step ", resume_step, " is not readable",
          c ? absl::StrCat(" (the newest is of step ", c->state.step, ")") : std::string(),
          warnings.empty() ? std::string() : absl::StrCat(": ", absl::StrJoin(warnings, "; "))));
    }
    resume = std::move(c->state);
  }

  absl::StatusOr<std::shared_ptr<engine::dist::RendezvousStore>> store;
  if (flags.count("store_server")) {
    std::string error;
    std::shared_ptr<grpc::Channel> channel = agents::AgentChannel(
        flags["store_server"], {flags["tls_ca"], flags["tls_cert"], flags["tls_key"]}, &error);
    if (!channel) return Fail(error);
    const char* token = std::getenv("AMPD_TOKEN");
    store = agents::GrpcStore(channel, token ? token : "", flags["job"], attempt);
  } else {
    store = engine::dist::FileStore(flags["rendezvous"]);
  }
  if (!store.ok()) return Fail(std::string(store.status().message()));
  absl::StatusOr<std::unique_ptr<engine::dist::ProcessGroup>> group;
  if (config.device == engine::Device::kCuda) {
    // This process sees its own device as device 0 (CUDA_VISIBLE_DEVICES,
    // set by the server).
    engine::dist::NcclOptions o;
    o.rank = rank;
    o.size = world_size;
    o.device = 0;
    o.store = *store;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    group = engine::dist::ConnectNcclGroup(o);
  } else {
    engine::dist::GlooOptions o;
    o.rank = rank;
    o.size = world_size;
    o.store = *store;
    if (flags.count("hostname")) o.hostname = flags["hostname"];
    o.timeout = std::chrono::milliseconds(timeout_ms);
    group = engine::dist::ConnectGloo(o);
  }
  if (!group.ok()) return Fail(std::string(group.status().message()));
  config.process_group = group->get();

  absl::StatusOr<runner::JobData> data = runner::LoadJobData(spec->data(), context, &config);
  if (!data.ok()) return Fail(std::string(data.status().message()));
  if (!data->tokens) {
    engine::nn::FillDataDims(&config.model, data->train.feature_dim, data->train.num_classes,
                             data->train.example_shape);
  }
  if (!resume) {
    if (absl::Status s = runner::LoadInitFrom(*spec, context, &config); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  auto trainer = data->tokens ? engine::train::Trainer::Create(config, data->tokens->View())
                              : engine::train::Trainer::Create(config, &data->train,
                                                               data->test ? &*data->test : nullptr);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()));
  if (resume) {
    if (absl::Status s = (*trainer)->LoadState(*resume); !s.ok()) {
      return Fail(absl::StrCat("cannot resume from checkpoint: ", s.message()));
    }
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string where =
      config.device == engine::Device::kCuda
          ? absl::StrCat("on CUDA device ", visible && *visible ? visible : "0", " over NCCL")
          : std::string("on the CPU over Gloo");
  std::printf("worker %d of %d: job %s, %lld steps %s%s\n", rank, world_size, flags["job"].c_str(),
              static_cast<long long>((*trainer)->total_steps()), where.c_str(),
              resume ? absl::StrCat(", resuming at step ", resume_step).c_str() : "");
  std::fflush(stdout);
  auto result = (*trainer)->Run(nullptr);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  // Leave together: no rank closes its connections while a peer reads.
  if (absl::Status s = (*group)->Barrier(); !s.ok()) return Fail(std::string(s.message()));
  std::printf("worker %d: done after %lld steps\n", rank,
              static_cast<long long>(result->steps_completed));
  return 0;
}

}  // namespace ampd::server
