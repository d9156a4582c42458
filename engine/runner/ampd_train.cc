// ampd_train: run one training job locally, from the same job spec file the
// server accepts, printing metrics as it goes.
//
//   ampd_train examples/fashion_mlp_bf16.json
//   ampd_train --explain examples/fashion_mlp_bf16.json
//   ampd_train --json spec.json        # one JSON object per metric record
//   ampd_train --steps=50 spec.json    # a short look at a long job
//   ampd_train --weights_out=model.safetensors spec.json   # the final weights
//   srun -n 2 ampd_train --rendezvous=/shared/run-1 spec.json  # 2 data-parallel workers
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/backend/backend.h"
#include "engine/cpu/host_memory.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/dist/launcher_env.h"
#include "engine/dist/process_group.h"
#include "engine/io/checkpoint.h"
#include "engine/runner/job_spec.h"
#include "engine/train/explain.h"
#include "engine/train/trainer.h"

namespace ampd::engine::runner {

using amp::SkipEvent;
using backend::BackendFor;
using ops::CastPolicyName;
using ops::PlanEntry;
using train::EvalMetrics;
using train::ExplainPrecision;
using train::MemoryEstimate;
using train::StepMetrics;
using train::Trainer;
using train::TrainerCallbacks;

namespace {

class Printer : public TrainerCallbacks {
 public:
  Printer(bool json, int64_t every) : json_(json), every_(every) {}
  void OnStep(const StepMetrics& m) override {
    if (m.step % every_ != 0 && m.step != m.total_steps && !m.skipped) return;
    if (json_) {
      std::printf(
          "{\"type\":\"step\",\"step\":%lld,\"total_steps\":%lld,\"epoch\":%lld,\"loss\":%.9g,"
          "\"lr\":%.6g,\"loss_scale\":%.6g,\"skipped\":%s,\"grad_norm\":%.6g,\"samples_per_s\":%."
          "1f,\"skipped_total\":%lld,\"tokens_per_s\":%.1f,\"mfu\":%.4g,\"allreduce_s\":%.6g,"
          "\"allreduce_hidden\":%.4g}\n",
          (long long)m.step, (long long)m.total_steps, (long long)m.epoch, m.loss, m.lr,
          m.loss_scale, m.skipped ? "true" : "false", m.grad_norm, m.samples_per_s,
          (long long)m.skipped_total, m.tokens_per_s, m.mfu, m.allreduce_s, m.allreduce_hidden);
    } else {
      std::string rate = m.tokens_per_s > 0 ? absl::StrFormat("%.0f tokens/s", m.tokens_per_s)
                                            : absl::StrFormat("%.0f samples/s", m.samples_per_s);
      if (m.mfu > 0) absl::StrAppendFormat(&rate, "  MFU %.1f%%", 100 * m.mfu);
      std::printf("step %6lld/%lld  epoch %lld  loss %.4f  lr %.3g  scale %g  %s%s\n",
                  (long long)m.step, (long long)m.total_steps, (long long)m.epoch, m.loss, m.lr,
                  m.loss_scale, m.skipped ? "SKIPPED  " : "", rate.c_str());
    }
    std::fflush(stdout);
  }
  void OnEval(const EvalMetrics& e) override {
    if (json_) {
      std::printf(
          "{\"type\":\"eval\",\"step\":%lld,\"loss\":%.9g,\"accuracy\":%.6g,\"tokens\":%lld,"
          "\"bits_per_byte\":%.6g}\n",
          (long long)e.step, e.loss, e.accuracy, (long long)e.tokens, e.bits_per_byte);
    } else if (e.tokens > 0) {
      std::printf("eval at step %lld: val loss %.4f", (long long)e.step, e.loss);
      if (e.bits_per_byte > 0) std::printf("  %.4f bits/byte", e.bits_per_byte);
      std::printf("  (%lld tokens)\n", (long long)e.tokens);
    } else {
      std::printf("eval at step %lld: loss %.4f  accuracy %.2f%%\n", (long long)e.step, e.loss,
                  100 * e.accuracy);
    }
    std::fflush(stdout);
  }
  void OnSkip(const SkipEvent& s) override {
    if (json_) {
      std::printf(
          "{\"type\":\"skip\",\"step\":%lld,\"reason\":\"%s\",\"parameter\":\"%s\","
          "\"scale_before\":%g,\"scale_after\":%g}\n",
          (long long)s.step, s.reason.c_str(), s.first_parameter.c_str(), s.scale_before,
          s.scale_after);
    }
  }

 private:
  bool json_;
  int64_t every_;
};

int Main(int argc, char** argv) {
  cpu::KeepHostMemoryMapped();  // a training process (engine/cpu/host_memory.h)
  bool json = false, explain = false;
  int64_t every = 50;
  int64_t steps = 0;               // 0: the spec's
  int rank = -1, world_size = -1;  // -1: from the launcher's environment
  std::string path, weights_out, rendezvous;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--explain") {
      explain = true;
    } else if (a.rfind("--log_every=", 0) == 0) {
      every = std::max(1LL, std::atoll(a.c_str() + 12));
    } else if (a.rfind("--steps=", 0) == 0) {
      steps = std::atoll(a.c_str() + 8);
      if (steps <= 0) {
        std::fprintf(stderr, "ampd_train: --steps must be a positive number, got %s\n",
                     a.c_str() + 8);
        return 2;
      }
    } else if (a.rfind("--weights_out=", 0) == 0 && a.size() > 14) {
      weights_out = a.substr(14);
    } else if (a.rfind("--rendezvous=", 0) == 0 && a.size() > 13) {
      rendezvous = a.substr(13);
    } else if (a.rfind("--rank=", 0) == 0 || a.rfind("--world_size=", 0) == 0) {
      const bool is_rank = a[2] == 'r';
      const std::string v = a.substr(a.find('=') + 1);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < (is_rank ? 0 : 1)) {
        std::fprintf(stderr, "ampd_train: %s must be a number >= %d, got \"%s\"\n",
                     is_rank ? "--rank" : "--world_size", is_rank ? 0 : 1, v.c_str());
        return 2;
      }
      (is_rank ? rank : world_size) = static_cast<int>(n);
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: ampd_train [--json] [--explain] [--log_every=N] [--steps=N]\n"
          "                  [--weights_out=FILE] SPEC.json\n"
          "Trains the job described by SPEC.json (ampd.v1.JobSpec in proto3 JSON) locally.\n"
          "--steps=N overrides training.steps (the schedule follows the new length).\n"
          "--weights_out=FILE writes the final weights there (safetensors; a GPT's in\n"
          "Hugging Face GPT-2's layout, as the server's jobs/JOB/model.safetensors).\n"
          "--rendezvous=DIR trains data-parallel (DDP's semantics, Gloo over TCP) with the\n"
          "  other workers given the same DIR (a fresh directory per run, on a file system\n"
          "  they all see); each worker's rank and the world size come from --rank and\n"
          "  --world_size, else from its launcher: AMPD_RANK/AMPD_WORLD_SIZE, srun's\n"
          "  SLURM_PROCID/SLURM_NTASKS, mpirun's OMPI_COMM_WORLD_RANK/_SIZE or PMI_RANK/\n"
          "  PMI_SIZE, a Kubernetes indexed Job's JOB_COMPLETION_INDEX with AMPD_WORLD_SIZE.\n"
          "  training.batchSize is the global batch; rank 0 prints and writes the weights.\n");
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "ampd_train: unknown flag %s (see --help)\n", a.c_str());
      return 2;
    } else {
      path = a;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: ampd_train [--json] [--explain] SPEC.json\n");
    return 2;
  }
  auto spec = ReadJobSpecFile(path);
  if (!spec.ok()) {
    std::fprintf(stderr, "ampd_train: %s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  if (steps > 0) spec->mutable_training()->set_steps(steps);
  JobSpecContext context;
  auto job = ResolveJobSpec(*spec, context);
  if (!job.ok()) {
    std::fprintf(stderr, "ampd_train: %s: %s\n", path.c_str(),
                 std::string(job.status().message()).c_str());
    return 2;
  }
  if (explain) {
    auto plan = ExplainPrecision(job->config.model, job->config.precision, job->config.optimizer,
                                 job->config.training.batch_size);
    if (!plan.ok()) {
      std::fprintf(stderr, "ampd_train: %s\n", std::string(plan.status().message()).c_str());
      return 2;
    }
    std::printf("precision %s, %lld parameters\n%-22s %-16s %-16s %-16s %-8s %-8s %s\n",
                plan->precision.c_str(), (long long)plan->parameter_count, "op", "layer", "inputs",
                "policy", "compute", "output", "output bytes");
    for (const PlanEntry& e : plan->ops) {
      std::string in;
      for (DType d : e.input_dtypes) in += (in.empty() ? "" : ",") + std::string(DTypeName(d));
      std::printf("%-22s %-16s %-16s %-16s %-8s %-8s %lld", e.op.c_str(), e.layer.c_str(),
                  in.c_str(), std::string(CastPolicyName(e.policy)).c_str(),
                  std::string(DTypeName(e.compute_dtype)).c_str(),
                  std::string(DTypeName(e.output_dtype)).c_str(), (long long)e.output_bytes);
      if (e.fp8) {
        std::printf("  FP8 GEMM: input %s, weight %s, grad_output %s, %s scaling",
                    core::Fp8FormatName(e.fp8->input), core::Fp8FormatName(e.fp8->weight),
                    core::Fp8FormatName(e.fp8->grad_output),
                    e.fp8->current_scaling ? "current" : "delayed");
      }
      std::printf("\n");
    }
    const MemoryEstimate& m = plan->memory;
    std::printf(
        "memory: weights %lld B, master %lld B, grads %lld B, optimizer %lld B, "
        "activations %lld B, total %lld B\n",
        (long long)m.weights_bytes, (long long)m.master_weights_bytes, (long long)m.gradients_bytes,
        (long long)m.optimizer_state_bytes, (long long)m.activation_bytes,
        (long long)m.total_bytes());
    return 0;
  }
  if (job->device != Device::kCpu) {
    auto backend = BackendFor(job->device);
    if (!backend.ok()) {
      std::fprintf(stderr, "ampd_train: %s\n", std::string(backend.status().message()).c_str());
      return 2;
    }
  }
  // Data-parallel: this worker's place and its group, before the data (a
  // peer that never comes fails here, not after minutes of loading).
  std::unique_ptr<dist::ProcessGroup> group;
  if (!rendezvous.empty()) {
    dist::WorldPlace place;
    if (rank >= 0 && world_size >= 1) {
      place = {rank, world_size, "--rank/--world_size"};
    } else if (rank >= 0 || world_size >= 1) {
      std::fprintf(stderr, "ampd_train: --rank and --world_size go together\n");
      return 2;
    } else {
      absl::StatusOr<dist::WorldPlace> p = dist::PlaceFromEnvironment(&std::getenv);
      if (!p.ok()) {
        std::fprintf(stderr, "ampd_train: --rendezvous: %s\n",
                     std::string(p.status().message()).c_str());
        return 2;
      }
      place = *p;
    }
    if (place.rank >= place.size) {
      std::fprintf(stderr, "ampd_train: --rank=%d is outside [0, --world_size=%d)\n", place.rank,
                   place.size);
      return 2;
    }
    absl::StatusOr<std::shared_ptr<dist::RendezvousStore>> store = dist::FileStore(rendezvous);
    if (!store.ok()) {
      std::fprintf(stderr, "ampd_train: %s\n", std::string(store.status().message()).c_str());
      return 2;
    }
    dist::GlooOptions o;
    o.rank = place.rank;
    o.size = place.size;
    o.store = *store;
    o.prefix = "ampd_train";
    absl::StatusOr<std::unique_ptr<dist::ProcessGroup>> g = dist::ConnectGloo(o);
    if (!g.ok()) {
      std::fprintf(stderr, "ampd_train: rank %d of %d (%s): %s\n", place.rank, place.size,
                   place.source.c_str(), std::string(g.status().message()).c_str());
      return 1;
    }
    group = *std::move(g);
    job->config.process_group = group.get();
    if (place.rank != 0) weights_out.clear();  // only rank 0 reports and writes
    if (absl::Status s = train::ValidateTrainerConfig(job->config); !s.ok()) {
      std::fprintf(stderr, "ampd_train: %s: %s\n", path.c_str(), std::string(s.message()).c_str());
      return 2;
    }
  }
  const bool quiet = group != nullptr && group->rank() != 0;
  auto data = LoadJobData(spec->data(), context, &job->config);
  if (!data.ok()) {
    std::fprintf(stderr, "ampd_train: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  // init_from: relative to the working directory, as the data files are.
  if (absl::Status s = LoadInitFrom(*spec, context, &job->config); !s.ok()) {
    std::fprintf(stderr, "ampd_train: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto trainer = data->tokens ? Trainer::Create(job->config, data->tokens->View())
                              : Trainer::Create(job->config, &data->train,
                                                data->test ? &*data->test : nullptr);
  if (!trainer.ok()) {
    std::fprintf(stderr, "ampd_train: %s: %s\n", path.c_str(),
                 std::string(trainer.status().message()).c_str());
    return 2;
  }
  if (!json && !quiet) {
    std::printf("training %s: %lld steps in %s\noptimizer: %s\n", path.c_str(),
                (long long)(*trainer)->total_steps(), job->config.precision.name.c_str(),
                train::DescribeOptimizer(job->config.model, job->config.optimizer).c_str());
    if (group != nullptr) {
      std::printf("data-parallel: %d workers, global batch %lld\n", group->size(),
                  (long long)job->config.training.batch_size);
    }
  }
  Printer printer(json, every);
  auto result = (*trainer)->Run(quiet ? nullptr : &printer);
  if (!result.ok()) {
    std::fprintf(stderr, "ampd_train: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  if (!weights_out.empty()) {
    if (absl::Status s =
            io::WriteModelWeights(weights_out, (*trainer)->SaveState(), job->config.model);
        !s.ok()) {
      std::fprintf(stderr, "ampd_train: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (group != nullptr) {
    // Leave together: no worker closes its connections while a peer reads.
    if (absl::Status s = group->Barrier(); !s.ok()) {
      std::fprintf(stderr, "ampd_train: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (quiet) return 0;
  if (!json && result->final_eval && result->final_eval->tokens > 0) {
    std::printf("done: %lld steps (%lld skipped), val loss %.4f\n",
                (long long)result->steps_completed, (long long)result->skipped_steps,
                result->final_eval->loss);
  } else if (!json && result->final_eval) {
    std::printf("done: %lld steps (%lld skipped), test accuracy %.2f%%\n",
                (long long)result->steps_completed, (long long)result->skipped_steps,
                100 * result->final_eval->accuracy);
  }
  return 0;
}

}  // namespace
}  // namespace ampd::engine::runner

int main(int argc, char** argv) { return ampd::engine::runner::Main(argc, argv); }
