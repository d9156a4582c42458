// One job from its data to its end, without a server: events, outcome,
// resume from a checkpoint, failures, and the data cache.

#include "server/jobs/job_runner.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "engine/io/checkpoint.h"
#include "gtest/gtest.h"

namespace ampd::server::jobs {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::ampd::v1;

class JobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }

  RunRequest Request(const std::string& json) {
    absl::StatusOr<v1::JobSpec> spec = engine::runner::ParseJobSpecJson(json, "test");
    EXPECT_TRUE(spec.ok()) << spec.status();
    RunRequest r;
    r.job_id = "j1";
    r.spec = *spec;
    absl::StatusOr<engine::runner::ResolvedJob> resolved =
        engine::runner::ResolveJobSpec(r.spec, r.context);
    EXPECT_TRUE(resolved.ok()) << resolved.status();
    if (resolved.ok()) r.resolved = *resolved;
    r.context.data_root = root_.string();
    r.outputs.data_root = root_.string();
    r.outputs.checkpoint_every_steps = 0;
    r.outputs.checkpoint_every_seconds = 0;
    return r;
  }

  static std::string Tiny(int steps) {
    return R"({"model": {"mlp": {"hidden": [16]}},
      "data": {"synthetic": {"numExamples": 256, "featureDim": 8, "numClasses": 3,
                             "numTestExamples": 64, "seed": 7}},
      "precision": {"profile": "32-true"},
      "training": {"steps": )" +
           std::to_string(steps) + R"(, "batchSize": 32, "evalInterval": 5, "seed": 1}})";
  }

  struct Recorded {
    int64_t total = -1;
    std::vector<v1::MetricsEvent> events;
    std::vector<int64_t> steps() const {
      std::vector<int64_t> s;
      for (const auto& e : events) {
        if (e.has_step_record()) s.push_back(e.step_record().step());
      }
      return s;
    }
  };
  RunHooks Hooks(Recorded* r, engine::train::CancellationToken* cancel = nullptr,
                 int64_t cancel_at = 0) {
    RunHooks h;
    h.started = [r](int64_t total, int64_t) { r->total = total; };
    h.event = [r, cancel, cancel_at](v1::MetricsEvent e) {
      if (cancel && e.has_step_record() && e.step_record().step() == cancel_at) cancel->Cancel();
      r->events.push_back(std::move(e));
    };
    return h;
  }

  fs::path root_;
  DataCache data_;
};

TEST_F(JobRunnerTest, ARunReportsEveryStepAndEvalInOrderAndWritesItsWeights) {
  Recorded rec;
  engine::train::CancellationToken cancel;
  const RunResult r = RunJob(Request(Tiny(10)), Hooks(&rec), &data_, &cancel);
  ASSERT_EQ(r.outcome, RunResult::Outcome::kSucceeded) << r.reason;
  EXPECT_EQ(rec.total, 10);
  EXPECT_EQ(rec.steps(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  int evals = 0;
  for (const auto& e : rec.events) evals += e.has_eval();
  EXPECT_EQ(evals, 2);  // at steps 5 and 10
  EXPECT_TRUE(fs::exists(root_ / "jobs" / "j1" / "model.safetensors"));
}

TEST_F(JobRunnerTest, ACancelledRunCheckpointsAndAResumedOneFinishesExactlyAsAnUnbrokenOne) {
  Recorded whole;
  engine::train::CancellationToken never;
  ASSERT_EQ(RunJob(Request(Tiny(12)), Hooks(&whole), &data_, &never).outcome,
            RunResult::Outcome::kSucceeded);

  fs::remove_all(root_ / "checkpoints");
  Recorded first;
  engine::train::CancellationToken cancel;
  const RunResult r = RunJob(Request(Tiny(12)), Hooks(&first, &cancel, 7), &data_, &cancel);
  ASSERT_EQ(r.outcome, RunResult::Outcome::kCancelled) << r.reason;
  EXPECT_EQ(first.steps().back(), 7);
  std::vector<std::string> warnings;
  auto checkpoint =
      engine::io::LoadLatestCheckpoint((root_ / "checkpoints" / "j1").string(), &warnings);
  ASSERT_TRUE(checkpoint.has_value());
  EXPECT_EQ(checkpoint->state.step, 7);

  RunRequest again = Request(Tiny(12));
  again.resume = checkpoint->state;
  Recorded second;
  engine::train::CancellationToken none;
  ASSERT_EQ(RunJob(again, Hooks(&second), &data_, &none).outcome, RunResult::Outcome::kSucceeded);
  EXPECT_EQ(second.steps(), (std::vector<int64_t>{8, 9, 10, 11, 12}));
  // Bit for bit on the CPU: the same last loss as the run that never stopped.
  EXPECT_EQ(second.events.back().step_record().loss(), whole.events.back().step_record().loss());
}

TEST_F(JobRunnerTest, FailuresSayWhy) {
  Recorded rec;
  engine::train::CancellationToken cancel;
  RunHooks refused = Hooks(&rec);
  refused.check_data = [] { return absl::InvalidArgumentError("data.file.train_csv: outside"); };
  RunResult r = RunJob(Request(Tiny(3)), refused, &data_, &cancel);
  EXPECT_EQ(r.outcome, RunResult::Outcome::kFailed);
  EXPECT_EQ(r.reason, "data.file.train_csv: outside");
  EXPECT_EQ(rec.total, -1);  // no trainer was built

  r = RunJob(Request(R"({"model": {"mlp": {"hidden": [4]}},
      "data": {"file": {"format": "FORMAT_CSV", "trainCsv": "missing.csv"}},
      "training": {"steps": 1, "batchSize": 2}})"),
             Hooks(&rec), &data_, &cancel);
  EXPECT_EQ(r.outcome, RunResult::Outcome::kFailed);
  EXPECT_NE(r.reason.find("missing.csv"), std::string::npos) << r.reason;

  RunRequest bad_resume = Request(Tiny(3));
  bad_resume.resume = engine::train::TrainerState{};
  bad_resume.resume->step = 99;
  r = RunJob(bad_resume, Hooks(&rec), &data_, &cancel);
  EXPECT_EQ(r.outcome, RunResult::Outcome::kFailed);
  EXPECT_EQ(r.reason.rfind("cannot resume from checkpoint: ", 0), 0u) << r.reason;
}

TEST_F(JobRunnerTest, SyntheticSetsAreLoadedOnceAndShared) {
  const RunRequest r = Request(Tiny(1));
  absl::StatusOr<DataCache::Sets> a = data_.Load(r.spec.data(), r.context, r.resolved.config);
  absl::StatusOr<DataCache::Sets> b = data_.Load(r.spec.data(), r.context, r.resolved.config);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->train.get(), b->train.get());
  ASSERT_NE(a->test, nullptr);
  EXPECT_EQ(a->test->num_examples, 64);
  EXPECT_EQ(data_.cached(), 1u);
}

TEST_F(JobRunnerTest, TheSetCacheKeepsTheMostRecentlyUsedFew) {
  // A server that runs many jobs over distinct synthetic sets must not keep
  // them all.
  RunRequest first = Request(Tiny(1));
  absl::StatusOr<DataCache::Sets> kept =
      data_.Load(first.spec.data(), first.context, first.resolved.config);
  ASSERT_TRUE(kept.ok());
  for (int seed = 1; seed < 40; ++seed) {
    RunRequest r = Request(Tiny(1));
    r.spec.mutable_data()->mutable_synthetic()->set_seed(seed);
    ASSERT_TRUE(data_.Load(r.spec.data(), r.context, r.resolved.config).ok());
    ASSERT_TRUE(data_.Load(first.spec.data(), first.context, first.resolved.config).ok());
    ASSERT_LE(data_.cached(), DataCache::kMaxSets);
  }
  EXPECT_EQ(data_.cached(), DataCache::kMaxSets);
  // Used all along, so still the same set.
  EXPECT_EQ(data_.Load(first.spec.data(), first.context, first.resolved.config)->train.get(),
            kept->train.get());
}

}  // namespace
}  // namespace ampd::server::jobs
