// Data-parallel training on the device path (the trainer's CUDA step) over
// NCCL, run on the CUDA emulator and its NCCL stand-in: 2 ranks (threads,
// each with its own stream) against 1 with the same global batch, within
// the bars; every rank ends with the same weights and loss scale;
// a Gloo group on a GPU job is refused by name.

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/dist/nccl_process_group.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/engine/mlp_config.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::engine {
namespace {

using train::StepMetrics;
using train::Trainer;
using train::TrainerConfig;

const data::Dataset& Data() { return testing::NoisyLabelData(); }

TrainerConfig Config(const std::string& precision, int64_t steps) {
  TrainerConfig c = testing::MlpTrainerConfig(32, {64, 64}, 4, precision, Device::kCuda);
  c.optimizer.kind = optim::OptimizerSpec::Kind::kAdamW;
  c.optimizer.lr = 3e-3;
  c.training.steps = steps;
  c.training.batch_size = 128;
  c.training.seed = 3;
  c.training.clip_norm = 1.0;  // the global norm: the ranks' gradients are averaged first
  return c;
}

struct RunResult {
  std::vector<StepMetrics> steps;               // rank 0's
  std::vector<std::vector<double>> scales;      // per rank, per step
  std::vector<std::vector<float>> first_param;  // per rank
};

RunResult Train(const std::string& precision, int workers, int64_t steps) {
  RunResult run;
  run.scales.resize(workers);
  run.first_param.resize(workers);
  std::shared_ptr<dist::RendezvousStore> store = dist::InProcessStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      TrainerConfig c = Config(precision, steps);
      std::unique_ptr<dist::NcclProcessGroup> group;
      if (workers > 1) {
        dist::NcclOptions o;
        o.rank = r;
        o.size = workers;
        o.store = store;
        absl::StatusOr<std::unique_ptr<dist::NcclProcessGroup>> g = dist::ConnectNccl(o);
        ASSERT_TRUE(g.ok()) << g.status();
        group = *std::move(g);
        c.process_group = group.get();
      }
      absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), nullptr);
      ASSERT_TRUE(t.ok()) << t.status();
      for (int64_t s = 0; s < steps; ++s) {
        const StepMetrics m = (*t)->RunStep();
        run.scales[r].push_back(m.loss_scale);
        if (r == 0) run.steps.push_back(m);
      }
      for (const auto& [name, tensor] : (*t)->SaveState().tensors) {
        if (name.rfind("param/", 0) == 0) {
          run.first_param[r] = tensor.ToFloats();
          break;
        }
      }
      if (group != nullptr) {
        EXPECT_TRUE(group->Barrier().ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return run;
}

double Rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

TEST(DdpDeviceEmuTest, TwoNcclRanksTrainAsOneWithTheSameGlobalBatch) {
  ASSERT_TRUE(backend::BackendFor(Device::kCuda).ok());
  constexpr int64_t kSteps = 60;
  for (const char* precision : {"32-true", "bf16-mixed", "16-mixed"}) {
    const RunResult one = Train(precision, 1, kSteps);
    const RunResult two = Train(precision, 2, kSteps);
    ASSERT_EQ(one.steps.size(), static_cast<size_t>(kSteps)) << precision;
    ASSERT_EQ(two.steps.size(), static_cast<size_t>(kSteps)) << precision;
    double worst20 = 0, worst = 0;
    for (int64_t s = 0; s < kSteps; ++s) {
      const double d = Rel(two.steps[s].loss, one.steps[s].loss);
      if (s < 20) worst20 = std::max(worst20, d);
      worst = std::max(worst, d);
      EXPECT_EQ(two.steps[s].skipped, one.steps[s].skipped) << precision << " step " << s;
      EXPECT_GT(two.steps[s].allreduce_s, 0) << precision;
    }
    if (std::string(precision) == "32-true") {
      EXPECT_LE(worst20, 1e-5) << precision;
      EXPECT_LE(worst, 1e-3) << precision;
    } else {
      EXPECT_LE(worst, 2e-2) << precision;
    }
    EXPECT_LT(two.steps.back().loss, two.steps.front().loss) << precision;
    // Same weights and the same loss scale on every rank, every step.
    EXPECT_FALSE(two.first_param[0].empty());
    EXPECT_EQ(two.first_param[0], two.first_param[1]) << precision;
    EXPECT_EQ(two.scales[0], two.scales[1]) << precision;
    std::printf("%s: worst relative loss gap %.3g (first 20), %.3g (all %lld)\n", precision,
                worst20, worst, static_cast<long long>(kSteps));
  }
}

TEST(DdpDeviceEmuTest, AGpuJobNeedsAnNcclGroup) {
  // A group whose collectives take host memory (Gloo's) on a GPU job.
  class HostGroup : public dist::ProcessGroup {
   public:
    int rank() const override { return 0; }
    int size() const override { return 2; }
    absl::Status AllReduceSum(float*, int64_t) override { return absl::OkStatus(); }
    absl::Status AllReduceMax(float*, int64_t) override { return absl::OkStatus(); }
    absl::Status Broadcast(float*, int64_t, int) override { return absl::OkStatus(); }
    absl::Status Barrier() override { return absl::OkStatus(); }
  } host;
  TrainerConfig c = Config("32-true", 10);
  c.process_group = &host;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &Data(), nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("NCCL"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace ampd::engine
