// A checkpoint's counters are input: DecodeCheckpoint refuses a missing,
// malformed or negative one by name, and LoadLatestCheckpoint then falls back
// to the next newest checkpoint instead of resuming from it.
#include "engine/io/checkpoint.h"

#include <map>
#include <string>
#include <vector>

#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "gtest/gtest.h"
#include "tests/engine/io/io_test_util.h"

namespace ampd::engine::io {
namespace {

using core::DType;
using core::Tensor;
using train::TrainerState;

std::map<std::string, std::string> GoodMetadata() {
  return {{"format", "ampd-checkpoint-v1"},
          {"step", "12"},
          {"skipped_total", "2"},
          {"data_epoch", "1"},
          {"data_index", "4"},
          {"data_windows", "0"},
          {"loss_scale", "32768"},
          {"growth_tracker", "3"},
          {"optimizer_steps", "10"}};
}

SafetensorsFile File(const std::map<std::string, std::string>& metadata) {
  SafetensorsFile f;
  f.metadata = metadata;
  f.tensors.emplace("param/w", Tensor::FromVector(std::vector<float>{1, 2, 3}, {3}, DType::kF32));
  f.names = {"param/w"};
  return f;
}

TEST(CheckpointTest, DecodeReadsEveryCounter) {
  absl::StatusOr<TrainerState> s = DecodeCheckpoint(File(GoodMetadata()));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 12);
  EXPECT_EQ(s->skipped_total, 2);
  EXPECT_EQ(s->data_position.epoch, 1);
  EXPECT_EQ(s->data_position.index, 4);
  EXPECT_EQ(s->scaler.scale, 32768.0);
  EXPECT_EQ(s->scaler.growth_tracker, 3);
  EXPECT_EQ(s->optimizer_steps, 10);
  ASSERT_EQ(s->tensors.size(), 1u);
  EXPECT_EQ(s->tensors[0].first, "param/w");
}

TEST(CheckpointTest, DecodeRefusesABadCounterNamingIt) {
  for (const char* key : {"step", "skipped_total", "data_epoch", "data_index", "data_windows",
                          "growth_tracker", "optimizer_steps", "loss_scale"}) {
    for (const char* bad : {"", "x", "-1", "1.5"}) {
      if (std::string(key) == "loss_scale" &&
          (std::string(bad) == "-1" || std::string(bad) == "1.5")) {
        continue;  // numbers: Trainer::LoadState judges a scale against the run
      }
      auto m = GoodMetadata();
      m[key] = bad;
      absl::StatusOr<TrainerState> s = DecodeCheckpoint(File(m));
      ASSERT_FALSE(s.ok()) << key << "=" << bad;
      EXPECT_NE(s.status().message().find(key), std::string::npos) << s.status();
    }
    auto m = GoodMetadata();
    m.erase(key);
    absl::StatusOr<TrainerState> s = DecodeCheckpoint(File(m));
    if (std::string(key) == "data_windows") {
      EXPECT_TRUE(s.ok()) << "older checkpoints have no data_windows: " << s.status();
    } else {
      ASSERT_FALSE(s.ok()) << key;
      EXPECT_NE(s.status().message().find(key), std::string::npos) << s.status();
    }
  }
  auto m = GoodMetadata();
  m["format"] = "ampd-checkpoint-v0";
  EXPECT_FALSE(DecodeCheckpoint(File(m)).ok());
}

TEST(CheckpointTest, ANewestCheckpointWithABadCounterIsSkippedForTheOlderOne) {
  const std::string dir = testing::MakeTempDir();
  TrainerState state;
  state.tensors.emplace_back("param/w",
                             Tensor::FromVector(std::vector<float>{1, 2}, {2}, DType::kF32));
  state.step = 5;
  state.optimizer_steps = 5;
  ASSERT_TRUE(WriteCheckpoint(dir, state, 3).ok());
  // Step 6, checksummed like any other, but with a negative step count.
  auto m = GoodMetadata();
  m["step"] = "6";
  m["optimizer_steps"] = "-4";
  const std::string path = dir + "/step-00000006.safetensors";
  std::string sha;
  ASSERT_TRUE(WriteSafetensors(path, state.tensors, m, &sha).ok());
  ASSERT_TRUE(WriteFileAtomically(path + ".sha256", sha + "\n").ok());

  std::vector<std::string> warnings;
  std::optional<LoadedCheckpoint> loaded = LoadLatestCheckpoint(dir, &warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->state.step, 5);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("step-00000006"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("optimizer_steps is negative"), std::string::npos) << warnings[0];
}

}  // namespace
}  // namespace ampd::engine::io
