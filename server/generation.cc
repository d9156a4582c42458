#include "server/generation.h"

#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/io/safetensors.h"
#include "engine/nn/weights_file.h"

namespace ampd::server {

namespace fs = std::filesystem;
namespace v1 = ::ampd::v1;

namespace {

constexpr char kFinal[] = "model.safetensors";
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

absl::Status Precondition(const std::string& what) { return absl::FailedPreconditionError(what); }

// "checkpoints/step-NNNNNNNN.safetensors": the checkpoint names a job has.
bool IsCheckpointName(const std::string& a) {
  const std::string file = a.substr(a.find('/') + 1);
  if (!absl::StartsWith(a, "checkpoints/") || file.size() != 25 ||
      !absl::StartsWith(file, "step-") || !absl::EndsWith(file, ".safetensors")) {
    return false;
  }
  for (int i = 5; i < 13; ++i) {
    if (file[i] < '0' || file[i] > '9') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<GenerationModel> LoadGenerationModel(const v1::Job& job, const std::string& artifact,
                                                    const std::string& data_root,
                                                    const engine::runner::JobSpecContext& context) {
  if (!job.spec().model().has_gpt()) {
    return Precondition("job " + job.id() +
                        " trains a classifier (model.mlp); Generate samples from a language "
                        "model (model.gpt)");
  }
  if (!artifact.empty() && artifact != kFinal && !IsCheckpointName(artifact)) {
    return absl::InvalidArgumentError(
        "must be empty, \"model.safetensors\" or a checkpoint "
        "(\"checkpoints/step-00000500.safetensors\"), as ListArtifacts names them");
  }
  absl::StatusOr<engine::runner::ResolvedJob> resolved =
      engine::runner::ResolveJobSpec(job.spec(), context);
  if (!resolved.ok()) {
    return Precondition(absl::StrCat(
        "job ", job.id(), "'s spec no longer resolves here: ", resolved.status().message()));
  }
  const auto* gpt = std::get_if<engine::nn::GptSpec>(&resolved->config.model);
  if (gpt == nullptr || !engine::nn::DataDimsKnown(resolved->config.model)) {
    return Precondition("job " + job.id() + "'s model sizes are not known");
  }
  // Which file: the one asked for, else the final weights, else the newest
  // checkpoint (step-NNNNNNNN sorts by step).
  const std::string job_dir = data_root + "/jobs/" + job.id() + "/";
  const std::string ckpt_dir = data_root + "/checkpoints/" + job.id() + "/";
  std::string chosen = artifact;
  std::error_code ec;
  if (chosen.empty()) {
    if (fs::exists(job_dir + kFinal, ec)) {
      chosen = kFinal;
    } else {
      std::string newest;
      for (const auto& e : fs::directory_iterator(ckpt_dir, ec)) {
        const std::string name = "checkpoints/" + e.path().filename().string();
        if (IsCheckpointName(name) && name > newest) newest = name;
      }
      chosen = newest;
    }
    if (chosen.empty()) {
      return Precondition("job " + job.id() +
                          " has no weights yet: no final weights and no checkpoint (it writes "
                          "checkpoints while it trains and its weights when it succeeds)");
    }
  }
  const std::string path = chosen == kFinal
                               ? job_dir + kFinal
                               : ckpt_dir + chosen.substr(std::string("checkpoints/").size());
  if (!fs::exists(path, ec)) return absl::NotFoundError(chosen);
  absl::StatusOr<engine::io::SafetensorsFile> file = engine::io::ReadSafetensors(path);
  if (!file.ok()) return file.status();
  std::map<std::string, engine::Tensor> weights;
  if (chosen == kFinal) {
    absl::StatusOr<std::map<std::string, engine::Tensor>> w =
        engine::nn::ImportWeights(*gpt, *file, chosen);
    if (!w.ok()) return absl::InternalError(std::string(w.status().message()));
    weights = *std::move(w);
  } else {
    for (auto& [name, t] : file->tensors) {
      if (absl::StartsWith(name, "param/")) weights[name.substr(6)] = t;
    }
  }
  GenerationModel m;
  absl::StatusOr<std::unique_ptr<engine::generate::Generator>> g =
      engine::generate::Generator::Create(*gpt, resolved->config.precision, resolved->config.device,
                                          weights);
  if (!g.ok()) return absl::InternalError(absl::StrCat(chosen, ": ", g.status().message()));
  m.generator = *std::move(g);
  m.artifact = chosen;
  m.byte_level = engine::runner::ByteLevelTokens(job.spec().data());
  return m;
}

std::string Utf8Decoder::Push(uint8_t b) {
  std::string out;
  if (need_ > 0) {
    if (b >= lo_ && b <= hi_) {
      pending_ += static_cast<char>(b);
      lo_ = 0x80, hi_ = 0xBF;
      if (--need_ == 0) out.swap(pending_);
      return out;
    }
    out = kReplacement;  // the character broke off; `b` starts afresh
    pending_.clear();
    need_ = 0;
  }
  if (b < 0x80) return out + static_cast<char>(b);
  // Well-formed UTF-8 only (RFC 3629; what protobuf accepts): no overlong
  // forms, no surrogates, nothing past U+10FFFF.
  lo_ = 0x80, hi_ = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need_ = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need_ = 2;
    if (b == 0xE0) lo_ = 0xA0;
    if (b == 0xED) hi_ = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need_ = 3;
    if (b == 0xF0) lo_ = 0x90;
    if (b == 0xF4) hi_ = 0x8F;
  } else {
    return out + kReplacement;
  }
  pending_ = std::string(1, static_cast<char>(b));
  return out;
}

std::string Utf8Decoder::Flush() {
  const bool any = need_ > 0;
  pending_.clear();
  need_ = 0;
  return any ? kReplacement : "";
}

}  // namespace ampd::server
