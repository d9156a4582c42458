// ampctl: the command-line client for ampd.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "client/watch.h"
#include "engine/io/sha256.h"
#include "google/protobuf/util/time_util.h"

namespace ampd::client {
namespace {

namespace v1 = ::ampd::v1;

// The arguments of one command: positional words and --flag[=value]s.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
  bool Has(const std::string& f) const { return flags.count(f) > 0; }
  std::string Get(const std::string& f, const std::string& def = "") const {
    auto it = flags.find(f);
    return it == flags.end() ? def : it->second;
  }
};

struct Command {
  std::string usage;
  std::string help;
  std::vector<std::string> flags;  // accepted flags (besides the global ones)
  std::function<int(Context&, const Args&)> run;
};

const char kGlobalHelp[] =
    "Global flags (before or after the command; --flag=VALUE or --flag VALUE):\n"
    "  --server=HOST:PORT   ampd to talk to (default: $AMPD_SERVER, else localhost:50051)\n"
    "  --output=table|json  output format (default table); also -o json\n"
    "  --timeout=SECONDS    deadline for each request (default 30)\n"
    "  --token=TOKEN        bearer token for a server with --tokens_file (default: $AMPD_TOKEN)\n"
    "  --tls_ca=PATH        PEM CA that signed the server's certificate; enables TLS\n"
    "                       (default: $AMPD_TLS_CA)\n"
    "  --tls_cert=PATH      PEM client certificate for mTLS, with --tls_key\n"
    "                       (default: $AMPD_TLS_CERT, $AMPD_TLS_KEY)\n"
    "  --tls_key=PATH       PEM private key of --tls_cert\n";

int Usage(const std::string& message, const Command* command) {
  std::fprintf(stderr, "ampctl: %s\n", message.c_str());
  if (command) std::fprintf(stderr, "usage: %s\n", command->usage.c_str());
  std::fprintf(stderr, "Run 'ampctl --help' for the commands.\n");
  return kExitUsage;
}

// "STEP/TOTAL", with "-" for a total not known yet (an epoch count before
// the data is loaded).
std::string Progress(const v1::Job& j) {
  const std::string total =
      j.progress().total_steps() > 0 ? std::to_string(j.progress().total_steps()) : "-";
  return std::to_string(j.progress().step()) + "/" + total;
}

// The EVAL column: a classifier's accuracy, a language model's val loss.
std::string EvalCell(const v1::Job& j) {
  if (!j.has_latest_eval()) return "-";
  const v1::EvalRecord& e = j.latest_eval();
  char cell[32];
  if (IsLanguageModelEval(e)) {
    std::snprintf(cell, sizeof cell, "loss %.3f", e.loss());
  } else {
    std::snprintf(cell, sizeof cell, "%.2f%%", 100 * e.accuracy());
  }
  return cell;
}

void PrintJobRow(const v1::Job& j) {
  const std::string progress = Progress(j);
  std::printf("%-15s %-10s %-12s %-13s %-11s %s\n", j.id().c_str(), StateName(j.state()).c_str(),
              j.precision().c_str(), progress.c_str(), EvalCell(j).c_str(),
              j.spec().display_name().c_str());
}

void PrintJob(const Context& ctx, const v1::Job& j) {
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(j).c_str());
    return;
  }
  std::printf("job        %s\n", j.name().c_str());
  if (!j.spec().display_name().empty())
    std::printf("name       %s\n", j.spec().display_name().c_str());
  std::printf("state      %s\n", StateName(j.state()).c_str());
  std::printf("precision  %s\n", j.precision().c_str());
  std::printf("progress   %s steps (%lld skipped)\n", Progress(j).c_str(),
              (long long)j.progress().skipped_steps());
  if (j.has_latest_step()) {
    const v1::StepRecord& r = j.latest_step();
    std::printf("loss       %.4f (step %lld), loss scale %g\n", r.loss(), (long long)r.step(),
                r.loss_scale());
    if (r.tokens_per_s() > 0) {
      std::printf("speed      %.0f tokens/s, MFU %.1f%%\n", r.tokens_per_s(), 100 * r.mfu());
    } else if (r.samples_per_s() > 0) {
      std::printf("speed      %.0f samples/s\n", r.samples_per_s());
    }
  }
  if (j.has_latest_eval()) {
    const v1::EvalRecord& e = j.latest_eval();
    if (IsLanguageModelEval(e)) {
      char bpb[48] = "";
      if (e.bits_per_byte() > 0)
        std::snprintf(bpb, sizeof bpb, ", %.4f bits/byte", e.bits_per_byte());
      std::printf("eval       val loss %.4f%s (step %lld)\n", e.loss(), bpb, (long long)e.step());
    } else {
      std::printf("eval       accuracy %.2f%%, loss %.4f (step %lld)\n", 100 * e.accuracy(),
                  e.loss(), (long long)e.step());
    }
  }
  if (!j.optimizer().empty()) std::printf("optimizer  %s\n", j.optimizer().c_str());
  if (j.optimizer_state_bytes() > 0) {
    std::printf("opt state  %.2f MiB allocated\n", j.optimizer_state_bytes() / 1048576.0);
  }
  if (!j.failure_reason().empty()) std::printf("reason     %s\n", j.failure_reason().c_str());
  for (const auto& t : j.transitions()) {
    std::printf("  %-11s at step %lld  %s\n", StateName(t.state()).c_str(), (long long)t.step(),
                google::protobuf::util::TimeUtil::ToString(t.time()).c_str());
  }
}

int Submit(Context& ctx, const Args& args) {
  v1::CreateJobRequest request;
  std::string error;
  if (!ReadJsonFile(args.positional[0], request.mutable_spec(), &error)) {
    std::fprintf(stderr, "ampctl: %s\n", error.c_str());
    return kExitUsage;
  }
  request.set_request_id(args.Get("request_id"));
  if (request.request_id().empty()) {
    // A fresh id per invocation: gRPC retries of this call cannot duplicate it.
    request.set_request_id(
        "ampctl-" + std::to_string(getpid()) + "-" +
        std::to_string(std::chrono::system_clock::now().time_since_epoch().count()));
  }
  v1::Job job;
  if (int rc = CallUnary(ctx, "submit " + args.positional[0], ctx.training.get(),
                         &v1::TrainingService::Stub::CreateJob, request, &job);
      rc != kExitOk) {
    return rc;
  }
  if (ctx.options.output == OutputFormat::kJson && !args.Has("watch")) {
    std::printf("%s\n", ToJson(job).c_str());
  } else if (ctx.options.output != OutputFormat::kJson) {
    std::printf("submitted %s (%s)\n", job.name().c_str(), job.precision().c_str());
  }
  std::fflush(stdout);
  if (!args.Has("watch")) return kExitOk;
  WatchOptions options;
  options.tty = isatty(STDOUT_FILENO) && ctx.options.output == OutputFormat::kTable;
  return WatchJob(ctx, job.name(), options);
}

int Watch(Context& ctx, const Args& args) {
  WatchOptions options;
  options.tty = isatty(STDOUT_FILENO) && ctx.options.output == OutputFormat::kTable;
  if (args.Has("reconnect_timeout")) {
    if (!absl::SimpleAtod(args.Get("reconnect_timeout"), &options.reconnect_timeout_s)) {
      return Usage("--reconnect_timeout: not a number", nullptr);
    }
  }
  return WatchJob(ctx, args.positional[0], options);
}

int Get(Context& ctx, const Args& args) {
  v1::GetJobRequest request;
  request.set_name(args.positional[0]);
  v1::Job job;
  if (int rc = CallUnary(ctx, "get " + args.positional[0], ctx.training.get(),
                         &v1::TrainingService::Stub::GetJob, request, &job);
      rc != kExitOk) {
    return rc;
  }
  PrintJob(ctx, job);
  return kExitOk;
}

int List(Context& ctx, const Args& args) {
  v1::ListJobsRequest request;
  if (args.Has("state")) {
    for (const std::string& s : std::vector<std::string>(absl::StrSplit(args.Get("state"), ','))) {
      v1::JobState state;
      if (!v1::JobState_Parse(absl::AsciiStrToUpper(s), &state) ||
          state == v1::JOB_STATE_UNSPECIFIED) {
        return Usage(
            "--state: unknown state \"" + s +
                "\" (QUEUED, RUNNING, RESTARTING, CANCELLING, SUCCEEDED, FAILED, CANCELLED)",
            nullptr);
      }
      request.add_states(state);
    }
  }
  std::vector<v1::Job> jobs;
  do {
    v1::ListJobsResponse response;
    if (int rc = CallUnary(ctx, "list", ctx.training.get(), &v1::TrainingService::Stub::ListJobs,
                           request, &response);
        rc != kExitOk) {
      return rc;
    }
    jobs.insert(jobs.end(), response.jobs().begin(), response.jobs().end());
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  if (ctx.options.output == OutputFormat::kJson) {
    v1::ListJobsResponse all;
    for (auto& j : jobs) *all.add_jobs() = j;
    std::printf("%s\n", ToJson(all).c_str());
    return kExitOk;
  }
  std::printf("%-15s %-10s %-12s %-13s %-11s %s\n", "ID", "STATE", "PRECISION", "PROGRESS", "EVAL",
              "NAME");
  for (const auto& j : jobs) PrintJobRow(j);
  return kExitOk;
}

int Cancel(Context& ctx, const Args& args) {
  v1::CancelJobRequest request;
  request.set_name(args.positional[0]);
  v1::Job job;
  if (int rc = CallUnary(ctx, "cancel " + args.positional[0], ctx.training.get(),
                         &v1::TrainingService::Stub::CancelJob, request, &job);
      rc != kExitOk) {
    return rc;
  }
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    std::printf("%s: %s\n", job.name().c_str(), StateName(job.state()).c_str());
  }
  return kExitOk;
}

int Delete(Context& ctx, const Args& args) {
  v1::DeleteJobRequest request;
  request.set_name(args.positional[0]);
  google::protobuf::Empty empty;
  if (int rc = CallUnary(ctx, "delete " + args.positional[0], ctx.training.get(),
                         &v1::TrainingService::Stub::DeleteJob, request, &empty);
      rc != kExitOk) {
    return rc;
  }
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("{}\n");
  } else {
    std::printf("deleted %s\n", args.positional[0].c_str());
  }
  return kExitOk;
}

std::string DTypeName(int d) {
  return v1::DType_Name(static_cast<v1::DType>(d)).substr(6);  // drop "DTYPE_"
}

int PrecisionCaps(Context& ctx, const Args&) {
  v1::Capabilities caps;
  if (int rc = CallUnary(ctx, "precision caps", ctx.precision.get(),
                         &v1::PrecisionService::Stub::GetCapabilities, v1::GetCapabilitiesRequest(),
                         &caps);
      rc != kExitOk) {
    return rc;
  }
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(caps).c_str());
    return kExitOk;
  }
  std::printf("%s\n", caps.server_version().c_str());
  for (const auto& d : caps.devices()) {
    std::printf("%s: %s\n", v1::Device_Name(d.kind()).c_str(), d.name().c_str());
    std::printf("  native bf16 %s, f16 %s, fp8 %s\n", d.bf16_native() ? "yes" : "no",
                d.f16_native() ? "yes" : "no", d.fp8_native() ? "yes" : "no");
    std::printf("  modes: %s\n", absl::StrJoin(d.precision_modes(), ", ").c_str());
    if (!d.notes().empty()) std::printf("  %s\n", d.notes().c_str());
  }
  for (const auto& u : caps.unavailable()) std::printf("unavailable: %s\n", u.c_str());
  return kExitOk;
}

int PrecisionExplain(Context& ctx, const Args& args) {
  v1::JobSpec spec;
  std::string error;
  if (!ReadJsonFile(args.positional[0], &spec, &error)) {
    std::fprintf(stderr, "ampctl: %s\n", error.c_str());
    return kExitUsage;
  }
  v1::ExplainPrecisionRequest request;
  *request.mutable_model() = spec.model();
  *request.mutable_data() = spec.data();
  *request.mutable_optimizer() = spec.optimizer();
  if (args.Has("all")) {
    // Every built-in mode, for comparison.
  } else if (args.Has("precision")) {
    request.mutable_precision()->set_profile(args.Get("precision"));
  } else if (spec.has_precision()) {
    *request.mutable_precision() = spec.precision();
  }
  if (spec.training().has_batch_size()) request.set_batch_size(spec.training().batch_size());
  v1::ExplainPrecisionResponse response;
  if (int rc = CallUnary(ctx, "precision explain " + args.positional[0], ctx.precision.get(),
                         &v1::PrecisionService::Stub::ExplainPrecision, request, &response);
      rc != kExitOk) {
    return rc;
  }
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(response).c_str());
    return kExitOk;
  }
  for (const auto& e : response.explanations()) {
    std::printf("%s (%lld parameters)\n", e.precision().c_str(), (long long)e.parameter_count());
    // Columns as wide as their longest cell (a GPT's ops and layers are
    // longer than an MLP's: "scaled_dot_product_attention", "h.11.mlp.c_fc").
    std::vector<std::vector<std::string>> rows = {
        {"OP", "LAYER", "INPUTS", "POLICY", "COMPUTE", "OUTPUT"}};
    for (const auto& op : e.ops()) {
      std::vector<std::string> in;
      for (int d : op.input_dtypes()) in.push_back(DTypeName(d));
      std::string output = DTypeName(op.output_dtype());
      if (op.has_fp8()) {
        absl::StrAppend(&output, "  FP8 GEMM: input ", op.fp8().input(), ", weight ",
                        op.fp8().weight(), ", grad_output ", op.fp8().grad_output(), ", ",
                        op.fp8().scaling(), " scaling");
      }
      rows.push_back({op.op(), op.layer(), absl::StrJoin(in, ","),
                      v1::CastPolicy_Name(op.policy()).substr(12), DTypeName(op.compute_dtype()),
                      output});
    }
    std::vector<size_t> width(5, 0);
    for (const auto& row : rows) {
      for (size_t c = 0; c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
    }
    for (const auto& row : rows) {
      std::string line = " ";
      for (size_t c = 0; c < width.size(); ++c) {
        absl::StrAppend(&line, " ", row[c], std::string(width[c] - row[c].size(), ' '));
      }
      std::printf("%s %s\n", line.c_str(), row.back().c_str());
    }
    const auto& m = e.memory();
    std::printf(
        "  memory: weights %.2f MiB, master %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, "
        "activations %.2f MiB, total %.2f MiB\n\n",
        m.weights_bytes() / 1048576.0, m.master_weights_bytes() / 1048576.0,
        m.gradients_bytes() / 1048576.0, m.optimizer_state_bytes() / 1048576.0,
        m.activation_bytes() / 1048576.0, m.total_bytes() / 1048576.0);
  }
  if (args.Has("all") && !spec.model().has_gpt()) {
    // The server leaves them out: FP8 is for a transformer's block linears.
    std::printf(
        "(not shown: the FP8 modes fp8-hybrid, fp8-current and transformer-engine-float16, which "
        "run a transformer's block linears in FP8: model.gpt only)\n");
  }
  return kExitOk;
}

int PrecisionProfiles(Context& ctx, const Args& args) {
  const std::string verb = args.positional.size() > 1 ? args.positional[1] : "list";
  if (verb == "list") {
    v1::ListProfilesResponse response;
    if (int rc = CallUnary(ctx, "precision profiles", ctx.precision.get(),
                           &v1::PrecisionService::Stub::ListProfiles, v1::ListProfilesRequest(),
                           &response);
        rc != kExitOk) {
      return rc;
    }
    if (ctx.options.output == OutputFormat::kJson) {
      std::printf("%s\n", ToJson(response).c_str());
      return kExitOk;
    }
    for (const auto& p : response.profiles()) {
      std::printf("%-22s %-8s %s\n", p.name().c_str(), p.builtin() ? "builtin" : "user",
                  p.description().c_str());
    }
    return kExitOk;
  }
  if (verb == "get" && args.positional.size() == 3) {
    v1::GetProfileRequest request;
    request.set_name(args.positional[2]);
    v1::PrecisionProfile profile;
    if (int rc = CallUnary(ctx, "precision profiles get", ctx.precision.get(),
                           &v1::PrecisionService::Stub::GetProfile, request, &profile);
        rc != kExitOk) {
      return rc;
    }
    std::printf("%s\n", ToJson(profile).c_str());
    return kExitOk;
  }
  if (verb == "create" && args.positional.size() == 4) {
    v1::CreateProfileRequest request;
    request.set_profile_id(args.positional[2]);
    std::string error;
    if (!ReadJsonFile(args.positional[3], request.mutable_profile()->mutable_config(), &error)) {
      std::fprintf(stderr, "ampctl: %s\n", error.c_str());
      return kExitUsage;
    }
    request.mutable_profile()->set_description(args.Get("description"));
    v1::PrecisionProfile profile;
    if (int rc = CallUnary(ctx, "precision profiles create", ctx.precision.get(),
                           &v1::PrecisionService::Stub::CreateProfile, request, &profile);
        rc != kExitOk) {
      return rc;
    }
    std::printf("created %s\n", profile.name().c_str());
    return kExitOk;
  }
  if (verb == "delete" && args.positional.size() == 3) {
    v1::DeleteProfileRequest request;
    request.set_name(args.positional[2]);
    google::protobuf::Empty empty;
    if (int rc = CallUnary(ctx, "precision profiles delete", ctx.precision.get(),
                           &v1::PrecisionService::Stub::DeleteProfile, request, &empty);
        rc != kExitOk) {
      return rc;
    }
    std::printf("deleted %s\n", args.positional[2].c_str());
    return kExitOk;
  }
  return Usage("precision profiles: expected list | get NAME | create ID CONFIG.json | delete ID",
               nullptr);
}

int Artifacts(Context& ctx, const Args& args) {
  v1::ListArtifactsRequest request;
  request.set_job(args.positional[0]);
  v1::ListArtifactsResponse response;
  if (int rc = CallUnary(ctx, "artifacts " + args.positional[0], ctx.artifacts.get(),
                         &v1::ArtifactService::Stub::ListArtifacts, request, &response);
      rc != kExitOk) {
    return rc;
  }
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(response).c_str());
    return kExitOk;
  }
  for (const auto& a : response.artifacts()) {
    std::printf("%-40s %12lld bytes\n", a.name().c_str(), (long long)a.size_bytes());
  }
  return kExitOk;
}

int Download(Context& ctx, const Args& args) {
  const std::string job = args.positional[0];
  const std::string artifact =
      args.positional.size() > 1 ? args.positional[1] : "model.safetensors";
  std::string out = args.Get("out");
  if (out.empty()) {
    std::string base = artifact.substr(artifact.rfind('/') + 1);
    out = job.substr(job.rfind('/') + 1) + "-" + base;
  }
  grpc::ClientContext call;  // no deadline: large files take as long as they take
  ctx.Authorize(&call);
  v1::DownloadArtifactRequest request;
  request.set_job(job);
  request.set_artifact(artifact);
  auto reader = ctx.artifacts->DownloadArtifact(&call, request);
  const std::string tmp = out + ".part";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "ampctl: download: cannot write %s\n", tmp.c_str());
    return kExitUsage;
  }
  engine::io::Sha256 sha;
  v1::ArtifactChunk chunk;
  std::string server_sha;
  int64_t bytes = 0;
  bool write_ok = true;
  while (reader->Read(&chunk)) {
    write_ok &= std::fwrite(chunk.data().data(), 1, chunk.data().size(), f) == chunk.data().size();
    sha.Update(chunk.data());
    bytes += static_cast<int64_t>(chunk.data().size());
    if (!chunk.sha256().empty()) server_sha = chunk.sha256();
  }
  write_ok &= std::fclose(f) == 0;
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    std::remove(tmp.c_str());
    return ReportRpcError(ctx, "download " + job + " " + artifact, status);
  }
  const std::string local_sha = sha.FinishHex();
  if (!write_ok || server_sha != local_sha) {
    std::remove(tmp.c_str());
    std::fprintf(stderr, "ampctl: download: %s\n",
                 write_ok ? "checksum mismatch: the file was damaged in transit; nothing saved"
                          : "cannot write the file (disk full?)");
    return kExitUsage;
  }
  std::rename(tmp.c_str(), out.c_str());
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("{\"path\": \"%s\", \"sizeBytes\": \"%lld\", \"sha256\": \"%s\"}\n", out.c_str(),
                (long long)bytes, local_sha.c_str());
  } else {
    std::printf("downloaded %s (%lld bytes, sha256 %s)\n", out.c_str(), (long long)bytes,
                local_sha.c_str());
  }
  return kExitOk;
}

int Upload(Context& ctx, const Args& args) {
  const std::string local = args.positional[0];
  const std::string remote = args.positional[1];
  std::FILE* f = std::fopen(local.c_str(), "rb");
  if (f == nullptr) {
    std::fprintf(stderr, "ampctl: upload: cannot open %s\n", local.c_str());
    return kExitUsage;
  }
  // First pass: size and checksum, so the server can check both.
  engine::io::Sha256 sha;
  std::string buffer(256 * 1024, '\0');
  int64_t size = 0;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    sha.Update(buffer.data(), n);
    size += static_cast<int64_t>(n);
  }
  std::rewind(f);
  grpc::ClientContext call;
  ctx.Authorize(&call);
  v1::UploadedDataset uploaded;
  auto writer = ctx.artifacts->UploadDataset(&call, &uploaded);
  v1::UploadDatasetRequest message;
  message.mutable_header()->set_path(remote);
  message.mutable_header()->set_size_bytes(size);
  message.mutable_header()->set_sha256(sha.FinishHex());
  bool ok = writer->Write(message);
  while (ok && (n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    message.Clear();
    message.set_chunk(buffer.data(), n);
    ok = writer->Write(message);
  }
  std::fclose(f);
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) return ReportRpcError(ctx, "upload " + local, status);
  if (ctx.options.output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(uploaded).c_str());
  } else {
    std::printf("uploaded %s as %s (%lld bytes); name it in a job spec as data.file: \"%s\"\n",
                local.c_str(), uploaded.path().c_str(), (long long)uploaded.size_bytes(),
                uploaded.path().c_str());
  }
  return kExitOk;
}

// Prints the text as it arrives (token ids, space-separated, for models that
// are not byte-level); with -o json one GenerateResponse per line.
int Generate(Context& ctx, const Args& args) {
  v1::GenerateRequest request;
  request.set_name(args.positional[0]);
  request.set_prompt(args.Get("prompt"));
  if (args.Has("prompt_tokens")) {
    for (absl::string_view t : absl::StrSplit(args.Get("prompt_tokens"), ',')) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(t, &id)) {
        return Usage("--prompt_tokens: expected comma-separated token ids", nullptr);
      }
      request.add_prompt_tokens(id);
    }
  }
  if (request.prompt().empty() && request.prompt_tokens_size() == 0) {
    return Usage("generate needs --prompt \"TEXT\" (or --prompt_tokens=ID,ID,...)", nullptr);
  }
  request.set_artifact(args.Get("artifact"));
  struct Number {
    const char* flag;
    std::function<void(double)> set;
  };
  const Number numbers[] = {
      {"max_new_tokens", [&](double v) { request.set_max_new_tokens(static_cast<int64_t>(v)); }},
      {"temperature", [&](double v) { request.set_temperature(v); }},
      {"top_k", [&](double v) { request.set_top_k(static_cast<int32_t>(v)); }},
      {"top_p", [&](double v) { request.set_top_p(v); }},
  };
  for (const Number& n : numbers) {
    if (!args.Has(n.flag)) continue;
    double v = 0;
    if (!absl::SimpleAtod(args.Get(n.flag), &v)) {
      return Usage(std::string("--") + n.flag + ": not a number", nullptr);
    }
    n.set(v);
  }
  if (args.Has("seed")) {
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(args.Get("seed"), &seed)) return Usage("--seed: not a number", nullptr);
    request.set_seed(seed);
  }
  grpc::ClientContext call;  // no deadline: a long generation takes its time
  ctx.Authorize(&call);
  auto reader = ctx.training->Generate(&call, request);
  v1::GenerateResponse r;
  const bool json = ctx.options.output == OutputFormat::kJson;
  bool byte_level = false;
  while (reader->Read(&r)) {
    if (json) {
      std::printf("%s\n", ToJson(r, false).c_str());
    } else if (!r.artifact().empty()) {  // the first response
      byte_level = r.byte_level();
      std::fprintf(stderr, "ampctl: sampling %s (%s, seed %llu)\n", request.name().c_str(),
                   r.artifact().c_str(), (unsigned long long)r.seed());
      std::printf("%s", request.prompt().c_str());
    }
    if (!json) {
      if (byte_level) {
        std::fwrite(r.text().data(), 1, r.text().size(), stdout);
      } else {
        for (int32_t t : r.tokens()) std::printf("%d ", t);
      }
      if (r.done()) {
        std::printf("\n");
        std::fflush(stdout);  // the text's line ends before the summary on a shared terminal
        std::fprintf(stderr, "ampctl: %lld tokens, %.0f tokens/s\n",
                     (long long)r.tokens_generated(), r.tokens_per_second());
      }
    }
    std::fflush(stdout);
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    if (!json) std::printf("\n");
    return ReportRpcError(ctx, "generate " + request.name(), status);
  }
  return kExitOk;
}

const std::map<std::string, Command>& Commands() {
  static const auto* commands = new std::map<std::string, Command>{
      {"submit",
       {"ampctl submit SPEC.json [--watch] [--request_id=ID]",
        "Submits the job in SPEC.json (proto3 JSON of ampd.v1.JobSpec, see examples/).\n"
        "  --watch       follow it to the end (exit code: 0 succeeded, 1 failed, 3 cancelled)\n"
        "  --request_id  idempotency key: resubmitting with the same id returns the same job",
        {"watch", "request_id"},
        Submit}},
      {"watch",
       {"ampctl watch JOB [--reconnect_timeout=SECONDS]",
        "Follows a job's metrics live until it ends: a progress bar on a terminal, one line per\n"
        "update on a pipe. Reconnects after a dropped connection without gaps or repeats.\n"
        "Exit code: 0 succeeded, 1 failed, 3 cancelled.",
        {"reconnect_timeout"},
        Watch}},
      {"get", {"ampctl get JOB", "Shows one job.", {}, Get}},
      {"logs",
       {"ampctl logs JOB [--follow] [--reconnect_timeout=SECONDS]",
        "Shows the job's own log: where it trains, checkpoints written, restarts and resumes,\n"
        "device memory, warnings, skipped steps and state changes. --follow keeps reading until\n"
        "the job ends, reconnecting after a dropped connection without gaps or repeats.",
        {"follow", "reconnect_timeout"},
        [](Context& ctx, const Args& args) {
          double timeout = 60;
          if (args.Has("reconnect_timeout") &&
              !absl::SimpleAtod(args.Get("reconnect_timeout"), &timeout)) {
            return Usage("--reconnect_timeout: not a number", nullptr);
          }
          return ShowLogs(ctx, args.positional[0], args.Has("follow"), timeout);
        }}},
      {"artifacts", {"ampctl artifacts JOB", "Lists a job's downloadable files.", {}, Artifacts}},
      {"download",
       {"ampctl download JOB [ARTIFACT] [--out=FILE]",
        "Downloads a job's final weights (model.safetensors, the default) or a checkpoint\n"
        "(checkpoints/step-NNNNNNNN.safetensors), verifying its SHA-256.",
        {"out"},
        Download}},
      {"upload",
       {"ampctl upload LOCAL_FILE REMOTE_PATH",
        "Uploads a data set (IDX or CSV) to the server's uploads/REMOTE_PATH, verified by\n"
        "SHA-256; job specs then name it as \"uploads/REMOTE_PATH\".",
        {},
        Upload}},
      {"generate",
       {"ampctl generate JOB --prompt \"TEXT\" [--max_new_tokens=N] [--temperature=T] "
        "[--top_k=K] [--top_p=P] [--seed=S] [--artifact=NAME] [--prompt_tokens=ID,...]",
        "Samples from a GPT job's weights (its final weights, else its newest checkpoint; or\n"
        "--artifact, as 'ampctl artifacts' lists them), printing the text as it arrives.\n"
        "  --max_new_tokens  tokens to generate (default 256)\n"
        "  --temperature     1 by default; 0 is greedy\n"
        "  --top_k, --top_p  sample only the k most likely tokens / the nucleus of mass p\n"
        "  --seed            the same seed gives the same text (default: random, printed)\n"
        "  --prompt_tokens   token ids instead of text (models trained on token shards)\n"
        "Ctrl-C stops the generation on the server at once.",
        {"prompt", "prompt_tokens", "max_new_tokens", "temperature", "top_k", "top_p", "seed",
         "artifact"},
        Generate}},
      {"list", {"ampctl list [--state=S[,S...]]", "Lists jobs, newest first.", {"state"}, List}},
      {"cancel", {"ampctl cancel JOB", "Cancels a queued or running job.", {}, Cancel}},
      {"delete", {"ampctl delete JOB", "Deletes an ended job and its history.", {}, Delete}},
      {"precision",
       {"ampctl precision caps | explain SPEC.json [--precision=MODE|--all] | profiles [list | get "
        "NAME | create ID CONFIG.json | delete ID]",
        "caps      devices and the precision modes each supports\n"
        "explain   per-op dtype plan and memory estimate of SPEC.json's model\n"
        "profiles  built-in and user-defined precision profiles",
        {"precision", "all", "description"},
        [](Context& ctx, const Args& args) {
          const std::string sub = args.positional[0];
          if (sub == "caps") return PrecisionCaps(ctx, args);
          if (sub == "explain") {
            if (args.positional.size() != 2)
              return Usage("precision explain needs SPEC.json", nullptr);
            Args a = args;
            a.positional.erase(a.positional.begin());
            return PrecisionExplain(ctx, a);
          }
          if (sub == "profiles") return PrecisionProfiles(ctx, args);
          return Usage("precision: unknown subcommand \"" + sub + "\"", nullptr);
        }}},
  };
  return *commands;
}

// The flags that take no value (all others do).
const std::set<std::string> kSwitches = {"watch", "all", "follow", "help"};

void PrintHelp() {
  std::printf("ampctl: submit, watch and manage ampd training jobs.\n\nCommands:\n");
  for (const auto& [name, c] : Commands()) std::printf("  %s\n", c.usage.c_str());
  std::printf("\n%s\nRun 'ampctl COMMAND --help' for details.\n", kGlobalHelp);
}

int Main(int argc, char** argv) {
  GlobalOptions global;
  if (const char* env = std::getenv("AMPD_SERVER"); env && *env) {
    global.server = env;
  } else {
    global.server = "localhost:50051";
  }
  auto env_or = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  global.token = env_or("AMPD_TOKEN");
  global.tls_ca = env_or("AMPD_TLS_CA");
  global.tls_cert = env_or("AMPD_TLS_CERT");
  global.tls_key = env_or("AMPD_TLS_KEY");
  std::string command;
  Args args;
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help = true;
    } else if (a.rfind("--", 0) == 0 || a == "-o" || a.rfind("-o=", 0) == 0) {
      // --flag=value and --flag value (kubectl, gcloud and docker take both),
      // and -o for --output; the switches (kSwitches) take no value.
      std::string key = a.rfind("--", 0) == 0 ? a.substr(2) : "output" + a.substr(2), value;
      const size_t eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (kSwitches.count(key)) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return Usage("--" + key + " needs a value (--" + key + "=VALUE or --" + key + " VALUE)",
                     nullptr);
      }
      args.flags[key] = value;
    } else if (command.empty()) {
      command = a;
    } else {
      args.positional.push_back(a);
    }
  }
  if (command.empty()) {
    PrintHelp();
    return help ? kExitOk : kExitUsage;
  }
  auto it = Commands().find(command);
  if (it == Commands().end()) return Usage("unknown command \"" + command + "\"", nullptr);
  const Command& c = it->second;
  if (help) {
    std::printf("usage: %s\n\n%s\n\n%s", c.usage.c_str(), c.help.c_str(), kGlobalHelp);
    return kExitOk;
  }
  for (const auto& [flag, value] : args.flags) {
    if (flag == "server") {
      global.server = value;
    } else if (flag == "token") {
      global.token = value;
    } else if (flag == "tls_ca") {
      global.tls_ca = value;
    } else if (flag == "tls_cert") {
      global.tls_cert = value;
    } else if (flag == "tls_key") {
      global.tls_key = value;
    } else if (flag == "output") {
      if (value == "json") {
        global.output = OutputFormat::kJson;
      } else if (value == "table") {
        global.output = OutputFormat::kTable;
      } else {
        return Usage("--output: expected table or json, got \"" + value + "\"", &c);
      }
    } else if (flag == "timeout") {
      if (!absl::SimpleAtod(value, &global.timeout_s) || global.timeout_s <= 0) {
        return Usage("--timeout: expected a positive number of seconds", &c);
      }
    } else if (std::find(c.flags.begin(), c.flags.end(), flag) == c.flags.end()) {
      return Usage("unknown flag --" + flag + " for " + command, &c);
    }
  }
  size_t min_args = 1, max_args = 1;
  if (command == "list") min_args = max_args = 0;
  if (command == "precision") max_args = 8;
  if (command == "download") max_args = 2;
  if (command == "upload") min_args = max_args = 2;
  if (args.positional.size() < min_args || args.positional.size() > max_args) {
    return Usage("wrong number of arguments", &c);
  }
  Context ctx;
  ctx.options = global;
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(64 << 20);
  std::string credentials_error;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      MakeChannelCredentials(global, &credentials_error);
  if (!credentials) return Usage(credentials_error, &c);
  ctx.channel = grpc::CreateCustomChannel(global.server, credentials, channel_args);
  ctx.training = v1::TrainingService::NewStub(ctx.channel);
  ctx.precision = v1::PrecisionService::NewStub(ctx.channel);
  ctx.artifacts = v1::ArtifactService::NewStub(ctx.channel);
  return c.run(ctx, args);
}

}  // namespace
}  // namespace ampd::client

int main(int argc, char** argv) { return ampd::client::Main(argc, argv); }
