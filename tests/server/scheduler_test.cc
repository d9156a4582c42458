// Scheduling against a real ampd process: priorities order the queue (FIFO
// within a priority), and --cpu_workers trains that many jobs at once.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ampd/v1/training_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"
#include "tests/server/rpc_test_util.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

const std::set<v1::JobState> kEnded = {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED};

class SchedulerTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    server_ = std::make_unique<AmpdProcess>(std::move(flags));
    ASSERT_TRUE(server_->ok()) << server_->log();
    stub_ = v1::TrainingService::NewStub(server_->channel());
  }

  std::unique_ptr<AmpdProcess> server_;
  std::unique_ptr<v1::TrainingService::Stub> stub_;
};

TEST_F(SchedulerTest, HigherPriorityRunsFirstAndFifoWithinAPriority) {
  Start({"--cpu_workers=1"});
  v1::Job blocker = CreateJob(stub_.get(), TinyJobJson(1000000));
  WaitForState(stub_.get(), blocker.name(), {v1::RUNNING});

  // Queued behind the blocker, in this order.
  struct Queued {
    std::string label;
    std::string name;
  };
  std::vector<Queued> queued;
  const std::vector<std::pair<std::string, int>> order = {
      {"p0-first", 0}, {"p5-first", 5}, {"p0-second", 0}, {"p5-second", 5}};
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string json =
        WithPriority(TinyJobJson(3, "32-true", static_cast<int>(i) + 1), order[i].second);
    v1::Job job = CreateJob(stub_.get(), json);
    ASSERT_FALSE(job.name().empty());
    EXPECT_EQ(job.spec().priority(), order[i].second);
    EXPECT_EQ(job.state(), v1::QUEUED);
    queued.push_back({order[i].first, job.name()});
  }
  // The one worker is still busy, so nothing else has started.
  EXPECT_EQ(GetJob(stub_.get(), blocker.name()).state(), v1::RUNNING);
  for (const Queued& q : queued) {
    EXPECT_EQ(GetJob(stub_.get(), q.name).state(), v1::QUEUED) << q.label;
  }

  CancelJob(stub_.get(), blocker.name());
  EXPECT_EQ(WaitForState(stub_.get(), blocker.name(), kEnded).state(), v1::CANCELLED);

  std::vector<std::pair<int64_t, std::string>> started;
  bool any_nanos = false;
  for (const Queued& q : queued) {
    v1::Job done = WaitForState(stub_.get(), q.name, kEnded);
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << q.label << ": " << done.failure_reason();
    const int64_t since = RunningSinceNanos(done);
    EXPECT_GT(since, 0) << q.label;
    EXPECT_TRUE(done.has_start_time()) << q.label;
    started.push_back({since, q.label});
    any_nanos |= done.start_time().nanos() != 0 || done.end_time().nanos() != 0;
  }
  // Timestamps must resolve sub-second order (these jobs all run within
  // one second); whole-second stamps would make the order unobservable.
  EXPECT_TRUE(any_nanos) << "job timestamps have whole-second resolution";
  std::stable_sort(started.begin(), started.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> labels;
  for (size_t i = 0; i < started.size(); ++i) {
    labels.push_back(started[i].second);
    if (i > 0) {
      EXPECT_LT(started[i - 1].first, started[i].first)
          << started[i - 1].second << " and " << started[i].second << " started at the same time";
    }
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"p5-first", "p5-second", "p0-first", "p0-second"}));

  // With one worker the jobs ran one after another: each started once the
  // previous one had ended.
  std::vector<v1::Job> by_start;
  for (const std::string& label : labels) {
    for (const Queued& q : queued) {
      if (q.label == label) by_start.push_back(GetJob(stub_.get(), q.name));
    }
  }
  for (size_t i = 1; i < by_start.size(); ++i) {
    const auto& prev_end = by_start[i - 1].end_time();
    const auto& start = by_start[i].start_time();
    EXPECT_TRUE(prev_end.seconds() < start.seconds() ||
                (prev_end.seconds() == start.seconds() && prev_end.nanos() <= start.nanos()))
        << labels[i - 1] << " ended after " << labels[i] << " started";
  }
}

TEST_F(SchedulerTest, TwoCpuWorkersTrainTwoJobsAtOnce) {
  Start({"--cpu_workers=2"});
  v1::Job a = CreateJob(stub_.get(), TinyJobJson(1000000, "32-true", 1));
  v1::Job b = CreateJob(stub_.get(), TinyJobJson(1000000, "32-true", 2));
  WaitForState(stub_.get(), a.name(), {v1::RUNNING});
  WaitForState(stub_.get(), b.name(), {v1::RUNNING});
  // Both are running at the same moment, and both make progress.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  v1::Job ra, rb;
  while (std::chrono::steady_clock::now() < deadline) {
    ra = GetJob(stub_.get(), a.name());
    rb = GetJob(stub_.get(), b.name());
    if (ra.progress().step() > 0 && rb.progress().step() > 0) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(ra.state(), v1::RUNNING);
  EXPECT_EQ(rb.state(), v1::RUNNING);
  EXPECT_GT(ra.progress().step(), 0);
  EXPECT_GT(rb.progress().step(), 0);
  // A third job waits for a free worker.
  v1::Job c = CreateJob(stub_.get(), TinyJobJson(3, "32-true", 3));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(GetJob(stub_.get(), c.name()).state(), v1::QUEUED);
  EXPECT_EQ(GetJob(stub_.get(), a.name()).state(), v1::RUNNING);
  EXPECT_EQ(GetJob(stub_.get(), b.name()).state(), v1::RUNNING);

  // Freeing one worker lets it run while the other long job continues.
  CancelJob(stub_.get(), a.name());
  EXPECT_EQ(WaitForState(stub_.get(), c.name(), kEnded).state(), v1::SUCCEEDED);
  EXPECT_EQ(GetJob(stub_.get(), b.name()).state(), v1::RUNNING);
  CancelJob(stub_.get(), b.name());
  EXPECT_EQ(WaitForState(stub_.get(), b.name(), kEnded).state(), v1::CANCELLED);
}

TEST_F(SchedulerTest, OneWorkerRunsOneJobAtATime) {
  Start({});
  v1::Job a = CreateJob(stub_.get(), TinyJobJson(1000000, "32-true", 1));
  v1::Job b = CreateJob(stub_.get(), TinyJobJson(1000000, "32-true", 2));
  WaitForState(stub_.get(), a.name(), {v1::RUNNING});
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(GetJob(stub_.get(), b.name()).state(), v1::QUEUED);
  CancelJob(stub_.get(), b.name());
  CancelJob(stub_.get(), a.name());
  EXPECT_EQ(WaitForState(stub_.get(), a.name(), kEnded).state(), v1::CANCELLED);
  EXPECT_EQ(GetJob(stub_.get(), b.name()).state(), v1::CANCELLED);
}

}  // namespace
}  // namespace ampd::testing
