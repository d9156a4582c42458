// Data-parallel training on the device path (the trainer's CUDA step) over
// NCCL, run on the CUDA emulator and its NCCL stand-in: 2 ranks (threads,
// each with its own stream) against 1 with the same global batch, within
// the bars; every rank ends with the same weights and loss scale;
// a Gloo group on a GPU job is refused by name; the buckets that overlap
// the backward give what all-reduces after it give, bit for bit.

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

// The NCCL group without its overlap: the trainer then all-reduces after the
// backward, the host waiting for each collective (its path for groups that
// cannot overlap).
class BlockingOnly : public dist::ProcessGroup {
 public:
  explicit BlockingOnly(dist::ProcessGroup* g) : g_(g) {}
  int rank() const override { return g_->rank(); }
  int size() const override { return g_->size(); }
  bool device_memory() const override { return true; }
  absl::Status AllReduceSum(float* d, int64_t n) override { return g_->AllReduceSum(d, n); }
  absl::Status AllReduceMax(float* d, int64_t n) override { return g_->AllReduceMax(d, n); }
  absl::Status Broadcast(float* d, int64_t n, int root) override {
    return g_->Broadcast(d, n, root);
  }
  absl::Status Barrier() override { return g_->Barrier(); }

 private:
  dist::ProcessGroup* g_;
};

RunResult Train(const std::string& precision, int workers, int64_t steps, bool blocking = false,
                int64_t grad_accumulation = 1) {
  RunResult run;
  run.scales.resize(workers);
  run.first_param.resize(workers);
  std::shared_ptr<dist::RendezvousStore> store = dist::InProcessStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      TrainerConfig c = Config(precision, steps);
      c.training.grad_accumulation = grad_accumulation;
      std::unique_ptr<dist::NcclProcessGroup> group;
      std::unique_ptr<BlockingOnly> blocking_group;
      if (workers > 1) {
        dist::NcclOptions o;
        o.rank = r;
        o.size = workers;
        o.store = store;
        absl::StatusOr<std::unique_ptr<dist::NcclProcessGroup>> g = dist::ConnectNccl(o);
        ASSERT_TRUE(g.ok()) << g.status();
        group = *std::move(g);
        c.process_group = group.get();
        if (blocking) {
          blocking_group = std::make_unique<BlockingOnly>(group.get());
          c.process_group = blocking_group.get();
        }
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
      EXPECT_GE(two.steps[s].allreduce_hidden, 0) << precision;
      EXPECT_LE(two.steps[s].allreduce_hidden, 1) << precision;
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

// The buckets launched during the backward (on NCCL's stream, behind
// markers of the backend's) sum exactly what the all-reduces after the
// backward sum: the same losses, weights and scales, bit for bit.
TEST(DdpDeviceEmuTest, OverlappingTheBackwardChangesNoBit) {
  ASSERT_TRUE(backend::BackendFor(Device::kCuda).ok());
  constexpr int64_t kSteps = 12;
  struct Case {
    const char* precision;
    int64_t grad_accumulation;  // 2: only the last micro-batch's backward overlaps
  };
  for (const Case& k : {Case{"32-true", 1}, Case{"bf16-mixed", 1}, Case{"32-true", 2}}) {
    SCOPED_TRACE(absl::StrCat(k.precision, ", accumulation ", k.grad_accumulation));
    const RunResult overlapped = Train(k.precision, 2, kSteps, false, k.grad_accumulation);
    const RunResult blocking = Train(k.precision, 2, kSteps, true, k.grad_accumulation);
    ASSERT_EQ(overlapped.steps.size(), blocking.steps.size());
    for (size_t s = 0; s < overlapped.steps.size(); ++s) {
      EXPECT_EQ(overlapped.steps[s].loss, blocking.steps[s].loss) << "step " << s;
      EXPECT_EQ(blocking.steps[s].allreduce_hidden, 0) << "the blocking path hides nothing";
    }
    EXPECT_FALSE(overlapped.first_param[0].empty());
    EXPECT_EQ(overlapped.first_param[0], blocking.first_param[0]);
    EXPECT_EQ(overlapped.first_param[1], blocking.first_param[1]);
    EXPECT_EQ(overlapped.scales, blocking.scales);
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
