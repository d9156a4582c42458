// libFuzzer target: arbitrary bytes as a training checkpoint
// (ampd-checkpoint-v1, a safetensors file) through what a resume does with
// one: the safetensors parser, DecodeCheckpoint, and Trainer::LoadState into
// three small runs (an MLP in 16-mixed with GradScaler and 8-bit AdamW
// states; an MLP in bf16-mixed with 32-bit AdamW and gradient accumulation; a
// byte-level GPT in fp8-hybrid, with token windows and FP8 scaling state). A
// state that loads must read back as it was given and take one training
// step. Build and run with tools/fuzz.
//
// The seeds (corpus/checkpoint_fuzzer/) are those runs' own checkpoints after
// three steps, written by this binary:
//   AMPD_FUZZ_WRITE_SEEDS=tests/fuzz/corpus/checkpoint_fuzzer build/fuzz/bin/checkpoint_fuzzer
//   -runs=0
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/amp/precision.h"
#include "engine/data/dataset.h"
#include "engine/data/text_tokens.h"
#include "engine/io/checkpoint.h"
#include "engine/io/safetensors.h"
#include "engine/nn/gpt.h"
#include "engine/train/trainer.h"

namespace {

using ampd::engine::data::Dataset;
using ampd::engine::train::Trainer;
using ampd::engine::train::TrainerConfig;
using ampd::engine::train::TrainerState;

const Dataset& Data() {
  static const Dataset* data = [] {
    ampd::engine::data::SyntheticSpec spec;
    spec.num_examples = 40;
    spec.feature_dim = 12;
    spec.num_classes = 3;
    spec.seed = 5;
    absl::StatusOr<Dataset> d = ampd::engine::data::MakeSyntheticDataset(spec);
    if (!d.ok()) std::abort();
    return new Dataset(*std::move(d));
  }();
  return *data;
}

constexpr int kRuns = 3;

// The GPT's tokens: a short repeating text, 10 % held out.
const ampd::engine::data::TokenSplit& Tokens() {
  static const auto* split = [] {
    std::string text;
    for (int i = 0; i < 200; ++i) text += i % 3 ? "the cat sat. " : "a dog ran! ";
    return new ampd::engine::data::TokenSplit(
        ampd::engine::data::SplitHeldOut(ampd::engine::data::ByteTokens(text, "fuzz"), 0.1));
  }();
  return *split;
}

TrainerConfig Config(int which) {
  using ampd::engine::optim::OptimizerSpec;
  TrainerConfig c;
  if (which == 2) {
    ampd::engine::nn::GptSpec g;
    g.vocab_size = 256;
    g.block_size = 8;
    g.n_layer = 1;
    g.n_head = 2;
    g.n_embd = 16;
    c.model = g;
    c.precision = *ampd::engine::amp::ResolvePrecision("fp8-hybrid");
    c.optimizer.lr = 1e-2;
    c.training.steps = 8;
    c.training.batch_size = 4;
    c.training.seed = 3;
    return c;
  }
  ampd::engine::nn::MlpSpec mlp;
  mlp.input_dim = 12;
  mlp.hidden = {32};
  mlp.num_classes = 3;
  mlp.layer_norm = true;
  mlp.dropout = 0.1;
  c.model = mlp;
  c.precision = *ampd::engine::amp::ResolvePrecision(which == 0 ? "16-mixed" : "bf16-mixed");
  c.precision.loss_scaling.growth_interval = 2;
  c.optimizer.kind = OptimizerSpec::Kind::kAdamW;
  c.optimizer.lr = 1e-2;
  if (which == 0) {
    c.optimizer.state_bits = 8;
    c.optimizer.min_8bit_size = 0;  // every tensor's states in 8 bits
  }
  c.training.steps = 8;
  c.training.batch_size = 8;
  c.training.grad_accumulation = which == 0 ? 1 : 2;
  c.training.seed = 3;
  return c;
}

std::unique_ptr<Trainer> Make(int which) {
  absl::StatusOr<std::unique_ptr<Trainer>> t;
  if (which == 2) {
    ampd::engine::train::TokenData tokens;
    tokens.train = {&Tokens().train};
    tokens.val = &Tokens().val;
    tokens.byte_level = true;
    t = Trainer::Create(Config(which), tokens);
  } else {
    t = Trainer::Create(Config(which), &Data(), nullptr);
  }
  if (!t.ok()) {
    std::fprintf(stderr, "checkpoint_fuzzer: %s\n", std::string(t.status().message()).c_str());
    std::abort();
  }
  return *std::move(t);
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "checkpoint_fuzzer: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("AMPD_FUZZ_WRITE_SEEDS");
  if (dir == nullptr || *dir == '\0') return 0;
  for (int which = 0; which < kRuns; ++which) {
    std::unique_ptr<Trainer> t = Make(which);
    for (int i = 0; i < 3; ++i) t->RunStep();
    const std::string sub = std::string(dir) + "/run" + std::to_string(which);
    absl::StatusOr<std::string> path = ampd::engine::io::WriteCheckpoint(sub, t->SaveState(), 1);
    Check(path.ok(), "cannot write a seed");
    // A seed must reach LoadState's success path in its own run.
    absl::StatusOr<ampd::engine::io::SafetensorsFile> file =
        ampd::engine::io::ReadSafetensors(*path);
    Check(file.ok(), "cannot read a seed back");
    absl::StatusOr<TrainerState> state = ampd::engine::io::DecodeCheckpoint(*file);
    Check(state.ok() && Make(which)->LoadState(*state).ok(), "a seed does not load into its run");
    std::filesystem::rename(*path, std::string(dir) + "/seed-" + std::to_string(which));
    std::filesystem::remove_all(sub);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<ampd::engine::io::SafetensorsFile> file =
      ampd::engine::io::ParseSafetensors(data, size, "fuzz.safetensors");
  if (!file.ok()) return 0;
  absl::StatusOr<TrainerState> state = ampd::engine::io::DecodeCheckpoint(*file);
  if (!state.ok()) return 0;
  for (int which = 0; which < kRuns; ++which) {
    std::unique_ptr<Trainer> t = Make(which);
    if (!t->LoadState(*state).ok()) {
      // Refused: nothing of it was restored.
      Check(t->SaveState().step == 0 && t->steps_done() == 0, "a refused state changed the run");
      continue;
    }
    const TrainerState back = t->SaveState();
    Check(back.step == state->step && back.skipped_total == state->skipped_total &&
              back.optimizer_steps == state->optimizer_steps &&
              back.token_windows == state->token_windows,
          "a loaded state reads back differently");
    if (t->steps_done() < t->total_steps()) t->RunStep();
  }
  return 0;
}
