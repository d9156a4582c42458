#include "engine/io/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "engine/io/sha256.h"
#include "engine/nn/weights_file.h"

namespace ampd::engine::io {

using train::TrainerState;

namespace {

namespace fs = std::filesystem;

constexpr char kFormat[] = "ampd-checkpoint-v1";

std::string Exact(double v) { return absl::StrFormat("%.17g", v); }

// Checkpoint files in `dir`, newest first.
std::vector<std::pair<int64_t, std::string>> List(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (name.size() == 25 && name.rfind("step-", 0) == 0 &&
        name.compare(13, 12, ".safetensors") == 0 && absl::SimpleAtoi(name.substr(5, 8), &step)) {
      out.emplace_back(step, entry.path().string());
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

template <typename T>
bool Get(const std::map<std::string, std::string>& m, const std::string& key, T* out) {
  auto it = m.find(key);
  if (it == m.end()) return false;
  if constexpr (std::is_same_v<T, double>) {
    return absl::SimpleAtod(it->second, out);
  } else {
    return absl::SimpleAtoi(it->second, out);
  }
}

}  // namespace

absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const TrainerState& state,
                                            int keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return absl::UnavailableError(
        absl::StrCat("checkpoint: cannot create ", dir, ": ", ec.message()));
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"step", absl::StrCat(state.step)},
      {"skipped_total", absl::StrCat(state.skipped_total)},
      {"data_epoch", absl::StrCat(state.data_position.epoch)},
      {"data_index", absl::StrCat(state.data_position.index)},
      {"data_windows", absl::StrCat(state.token_windows)},
      {"loss_scale", Exact(state.scaler.scale)},
      {"growth_tracker", absl::StrCat(state.scaler.growth_tracker)},
      {"optimizer_steps", absl::StrCat(state.optimizer_steps)},
  };
  const std::string path = absl::StrFormat("%s/step-%08d.safetensors", dir, state.step);
  std::string sha;
  if (absl::Status s = WriteSafetensors(path, state.tensors, meta, &sha); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("checkpoint: ", s.message()));
  }
  if (absl::Status s = WriteFileAtomically(path + ".sha256", sha + "\n"); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("checkpoint: ", s.message()));
  }
  const auto all = List(dir);
  for (size_t i = std::max(keep, 1); i < all.size(); ++i) {
    fs::remove(all[i].second, ec);
    fs::remove(all[i].second + ".sha256", ec);
  }
  return path;
}

absl::StatusOr<TrainerState> DecodeCheckpoint(const SafetensorsFile& file) {
  const auto& m = file.metadata;
  auto format = m.find("format");
  if (format == m.end() || format->second != kFormat) {
    return absl::InvalidArgumentError(absl::StrCat("not an ", kFormat, " checkpoint"));
  }
  TrainerState s;
  // Each field: present, a number, and in its range (a checkpoint is input
  // too: one that passes here can still be refused by Trainer::LoadState,
  // which knows the run).
  auto integer = [&](const char* key, int64_t* out) -> absl::Status {
    if (!Get(m, key, out)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: ", key, " is missing or not an integer"));
    }
    if (*out < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: ", key, " is negative (", *out, ")"));
    }
    return absl::OkStatus();
  };
  for (const auto& [key, out] : std::initializer_list<std::pair<const char*, int64_t*>>{
           {"step", &s.step},
           {"skipped_total", &s.skipped_total},
           {"data_epoch", &s.data_position.epoch},
           {"data_index", &s.data_position.index},
           {"growth_tracker", &s.scaler.growth_tracker},
           {"optimizer_steps", &s.optimizer_steps}}) {
    if (absl::Status st = integer(key, out); !st.ok()) return st;
  }
  // A language model's window count; checkpoints of classifiers written
  // before it existed have none (and need none: 0).
  if (m.count("data_windows")) {
    if (absl::Status st = integer("data_windows", &s.token_windows); !st.ok()) return st;
  }
  if (!Get(m, "loss_scale", &s.scaler.scale)) {
    return absl::InvalidArgumentError("checkpoint: loss_scale is missing or not a number");
  }
  for (const std::string& name : file.names) s.tensors.emplace_back(name, file.tensors.at(name));
  return s;
}

std::optional<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& dir,
                                                     std::vector<std::string>* warnings) {
  for (const auto& [step, path] : List(dir)) {
    std::ifstream sidecar(path + ".sha256");
    std::string expected;
    sidecar >> expected;
    absl::StatusOr<std::string> actual = Sha256FileHex(path);
    if (!actual.ok() || expected.empty() || *actual != expected) {
      warnings->push_back(absl::StrCat(path, ": checksum mismatch or missing; skipping it"));
      continue;
    }
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
    if (!file.ok()) {
      warnings->push_back(absl::StrCat(file.status().message(), "; skipping it"));
      continue;
    }
    absl::StatusOr<TrainerState> state = DecodeCheckpoint(*file);
    if (!state.ok()) {
      warnings->push_back(absl::StrCat(path, ": ", state.status().message(), "; skipping it"));
      continue;
    }
    if (state->step != step) {
      warnings->push_back(absl::StrCat(path, ": holds step ", state->step,
                                       ", not the one its name says; skipping it"));
      continue;
    }
    LoadedCheckpoint loaded;
    loaded.path = path;
    loaded.state = *std::move(state);
    return loaded;
  }
  return std::nullopt;
}

absl::Status WriteModelWeights(const std::string& path, const TrainerState& state,
                               const nn::ModelSpec& model) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const auto& [name, t] : state.tensors) {
    if (name.rfind("param/", 0) == 0) weights.emplace_back(name.substr(6), t);
  }
  // The buffers after the parameters, as a torch state_dict has them.
  for (const auto& [name, t] : state.tensors) {
    if (name.rfind("buffer/", 0) == 0) weights.emplace_back(name.substr(7), t);
  }
  const nn::WeightsFileContents file = nn::ExportWeights(model, weights);
  return WriteSafetensors(path, file.tensors, file.metadata);
}

}  // namespace ampd::engine::io
