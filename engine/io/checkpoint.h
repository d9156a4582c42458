#ifndef AMPD_ENGINE_IO_CHECKPOINT_H_
#define AMPD_ENGINE_IO_CHECKPOINT_H_

// Training checkpoints: a TrainerState as a safetensors file (model weights,
// master weights, optimizer moments; step, data position and GradScaler state
// in the metadata), written atomically with a SHA-256 sidecar, newest K kept.
//
//   DIR/step-00000200.safetensors
//   DIR/step-00000200.safetensors.sha256

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/io/safetensors.h"
#include "engine/nn/model.h"
#include "engine/train/trainer.h"

namespace ampd::engine::io {

// Writes the checkpoint for `state.step` into `dir` (created if missing), then
// removes all but the newest `keep` checkpoints. Returns the file written.
absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir,
                                            const train::TrainerState& state, int keep);

struct LoadedCheckpoint {
  train::TrainerState state;
  std::string path;
};

// The newest checkpoint in `dir` whose checksum and contents verify. Ones that
// do not are skipped, each with a line in `warnings`. nullopt: none usable.
std::optional<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& dir,
                                                     std::vector<std::string>* warnings);

// The TrainerState a checkpoint file holds (what LoadLatestCheckpoint reads
// once the checksum verifies): the format, and every counter present, an
// integer and not negative, the loss scale a number. The error names the
// field. Whether the state fits a run is Trainer::LoadState's to check.
absl::StatusOr<train::TrainerState> DecodeCheckpoint(const SafetensorsFile& file);

// Final model weights in the dtype the model computes with, in the model's
// file layout (nn/weights_file.h: the MLP's parameter names; a GPT's in
// Hugging Face GPT-2's layout with its config), for
// safetensors.torch.load_file, transformers and JobSpec.init_from.
absl::Status WriteModelWeights(const std::string& path, const train::TrainerState& state,
                               const nn::ModelSpec& model);

}  // namespace ampd::engine::io

#endif  // AMPD_ENGINE_IO_CHECKPOINT_H_
