// A run's outputs, driven step by step by a real (tiny) trainer.

#include "server/jobs/run_outputs.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/io/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/engine/mlp_config.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::server::jobs {
namespace {

namespace fs = std::filesystem;

class RunOutputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
    engine::train::TrainerConfig c =
        engine::testing::MlpTrainerConfig(8, {8}, 3, "32-true", engine::Device::kCpu);
    c.training.steps = 10;
    c.training.batch_size = 16;
    auto t =
        engine::train::Trainer::Create(c, &engine::testing::SyntheticData(128, 8, 3, 1), nullptr);
    ASSERT_TRUE(t.ok()) << t.status();
    trainer_ = *std::move(t);
  }

  std::unique_ptr<RunOutputs> Open(RunOutputOptions o) {
    o.data_root = root_.string();
    auto out = RunOutputs::Open("j1", trainer_.get(), &cancel_, std::move(o));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *std::move(out) : nullptr;
  }
  void Steps(RunOutputs& out, int n) {
    for (int i = 0; i < n; ++i) out.AfterStep(trainer_->RunStep());
  }
  std::vector<std::string> Checkpoints() const {
    std::vector<std::string> names;
    const fs::path dir = root_ / "checkpoints" / "j1";
    if (!fs::exists(dir)) return names;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path root_;
  std::unique_ptr<engine::train::Trainer> trainer_;
  engine::train::CancellationToken cancel_;
};

TEST_F(RunOutputsTest, CheckpointsEveryNStepsKeepsTheNewestAndWritesTheWeightsAtTheEnd) {
  RunOutputOptions o;
  o.checkpoint_every_steps = 3;
  o.checkpoint_every_seconds = 0;
  o.keep_checkpoints = 2;
  int flushes = 0;
  o.before_checkpoint = [&] { ++flushes; };
  std::unique_ptr<RunOutputs> out = Open(o);
  Steps(*out, 10);  // due at 3, 6, 9; never at the last step
  EXPECT_EQ(out->checkpoints_written(), 3);
  EXPECT_EQ(flushes, 3);  // the history is flushed before each
  EXPECT_EQ(Checkpoints().size(), 2u);
  std::vector<std::string> warnings;
  auto latest = engine::io::LoadLatestCheckpoint(out->checkpoint_dir(), &warnings);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->state.step, 9);
  EXPECT_TRUE(out->Finish(/*cancelled=*/false).ok());
  EXPECT_TRUE(fs::exists(root_ / "jobs" / "j1" / "model.safetensors"));
  EXPECT_FALSE(fs::is_empty(root_ / "tensorboard" / "j1"));
  EXPECT_FALSE(cancel_.cancelled());
}

TEST_F(RunOutputsTest, TheTimeTriggerUsesItsClockAndACancelledRunCheckpointsInsteadOfWeights) {
  auto t = std::chrono::steady_clock::time_point();
  RunOutputOptions o;
  o.checkpoint_every_steps = 0;
  o.checkpoint_every_seconds = 60;
  o.now = [&] { return t; };
  std::unique_ptr<RunOutputs> out = Open(o);
  Steps(*out, 2);
  EXPECT_EQ(out->checkpoints_written(), 0);
  t += std::chrono::seconds(61);
  Steps(*out, 1);
  EXPECT_EQ(out->checkpoints_written(), 1);
  Steps(*out, 1);  // the clock has not moved since
  EXPECT_EQ(out->checkpoints_written(), 1);
  out->Checkpoint();  // step 4: new state, written
  out->Checkpoint();  // no step since: nothing
  EXPECT_EQ(out->checkpoints_written(), 2);
  Steps(*out, 1);
  EXPECT_TRUE(out->Finish(/*cancelled=*/true).ok());
  EXPECT_EQ(out->checkpoints_written(), 3);  // the resume point
  EXPECT_FALSE(fs::exists(root_ / "jobs" / "j1" / "model.safetensors"));
}

TEST_F(RunOutputsTest, AStorageErrorCancelsTheRunAndIsWhatFinishReports) {
  RunOutputOptions o;
  o.checkpoint_every_steps = 2;
  o.checkpoint_every_seconds = 0;
  std::unique_ptr<RunOutputs> out = Open(o);
  // A file where the checkpoint directory should be.
  fs::create_directories(root_ / "checkpoints");
  std::ofstream(root_ / "checkpoints" / "j1") << "not a directory";
  Steps(*out, 3);
  EXPECT_FALSE(out->error().ok());
  EXPECT_TRUE(cancel_.cancelled());
  const absl::Status s = out->Finish(/*cancelled=*/true);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s, out->error());
  EXPECT_EQ(out->checkpoints_written(), 0);
}

TEST_F(RunOutputsTest, AnUnwritableLogDirectoryIsAnErrorAtOpen) {
  std::ofstream(root_ / "tensorboard") << "not a directory";
  RunOutputOptions o;
  o.data_root = root_.string();
  auto out = RunOutputs::Open("j1", trainer_.get(), &cancel_, o);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(std::string(out.status().message()).find("cannot write TensorBoard logs"),
            std::string::npos)
      << out.status();
}

}  // namespace
}  // namespace ampd::server::jobs

namespace ampd::server::jobs {
namespace {

// An FP8 job's scaling records go to TensorBoard as fp8/LAYER/ROLE/scale and
// .../amax scalars (tags as they appear in the event file's bytes).
TEST_F(RunOutputsTest, Fp8ScalingRecordsAreTensorBoardScalars) {
  std::unique_ptr<RunOutputs> out = Open({});
  engine::train::Fp8ScalingRecord r;
  r.step = 1;
  r.tensors.push_back({"h.0.attn.c_attn", "input", 112.0, 4.0});
  r.tensors.push_back({"h.0.attn.c_attn", "grad_output", 57344.0, 1.0});
  out->AfterFp8Scaling(r);
  out.reset();  // flushes and closes the event file
  std::string bytes;
  for (const auto& e : fs::directory_iterator(root_ / "tensorboard" / "j1")) {
    std::ifstream in(e.path(), std::ios::binary);
    bytes.append(std::istreambuf_iterator<char>(in), {});
  }
  for (const char* tag : {"fp8/h.0.attn.c_attn/input/scale", "fp8/h.0.attn.c_attn/input/amax",
                          "fp8/h.0.attn.c_attn/grad_output/scale"}) {
    EXPECT_NE(bytes.find(tag), std::string::npos) << tag;
  }
}

}  // namespace
}  // namespace ampd::server::jobs
