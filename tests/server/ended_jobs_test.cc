// Memory bounded by what is active: once the store has all of an ended job,
// its record and history leave memory (JobsInMemory), and every read of it
// goes to the store through the ended-job cache: GetJob, ListJobs, CancelJob,
// DeleteJob, an idempotent CreateJob retry, and streams, which replay its
// history in pages with the same contract as from memory (every event once,
// in order, resumable after any step record). A restart loads only what is
// active. The cache is off (0 bytes) in most tests, so that nothing is
// served from memory by accident.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "server/job_manager.h"
#include "server/job_store.h"
#include "tests/server/ampd_process.h"

namespace ampd::server {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

std::string TmpDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

v1::JobSpec Spec(int steps, int seed) {
  v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(
                  ampd::testing::TinyJobJson(steps, "32-true", seed), &spec)
                  .ok());
  return spec;
}

class EndedJobsTest : public ::testing::Test {
 protected:
  void Open(size_t cache_bytes = 0) {
    manager_.reset();
    store_.reset();
    auto store = OpenSqliteJobStore(dir_ + "/ampd.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    JobManagerOptions o;
    o.data_root = dir_;
    o.store = store_.get();
    o.persist_interval_ms = 5;
    o.checkpoint_every_steps = 0;
    o.checkpoint_every_seconds = 0;
    o.ended_job_cache_bytes = cache_bytes;
    manager_ = std::make_unique<JobManager>(o);
  }
  void TearDown() override {
    if (manager_) manager_->Shutdown();
  }

  std::string Create(int steps, int seed, const std::string& request_id = "") {
    absl::StatusOr<v1::Job> job = manager_->Create(Spec(steps, seed), request_id, "alice");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }
  // Until the job has ended and nothing ended is left in memory.
  void WaitUntilOnlyInTheStore(const std::vector<std::string>& ids, size_t active = 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      bool ended = true;
      for (const std::string& id : ids) {
        absl::StatusOr<v1::Job> j = manager_->Get(id);
        ended = ended && j.ok() &&
                (j->state() == v1::SUCCEEDED || j->state() == v1::FAILED ||
                 j->state() == v1::CANCELLED);
      }
      if (ended && manager_->JobsInMemory() == active) return;
      std::this_thread::sleep_for(milliseconds(5));
    }
    FAIL() << manager_->JobsInMemory() << " jobs still in memory";
  }
  // A stream's view: from the cursor for `since_step` to the end.
  std::vector<v1::MetricsEvent> Replay(const std::string& id, int64_t since_step = 0,
                                       size_t per_read = 1) {
    std::vector<v1::MetricsEvent> out;
    absl::StatusOr<size_t> cursor = manager_->StartCursor(id, since_step);
    EXPECT_TRUE(cursor.ok()) << cursor.status();
    if (!cursor.ok()) return out;
    for (size_t c = *cursor;;) {
      std::vector<grpc::Slice> wire;
      bool terminal = false, training = true;
      absl::Status s = manager_->ReadWire(id, c, per_read, &wire, &terminal, &training);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) break;
      EXPECT_FALSE(training);
      for (const grpc::Slice& w : wire) {
        v1::MetricsEvent e;
        EXPECT_TRUE(e.ParseFromArray(w.begin(), static_cast<int>(w.size())));
        out.push_back(std::move(e));
      }
      c += wire.size();
      if (terminal) break;
      if (wire.empty()) {
        ADD_FAILURE() << "no progress at " << c;
        break;
      }
    }
    return out;
  }

  const std::string dir_ = TmpDir("ended_jobs");
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobManager> manager_;
};

// The history of `steps` steps as a stream must see it: every event once,
// in order, each step record once, ending with the final state.
void ExpectWholeHistory(const std::vector<v1::MetricsEvent>& events, int steps) {
  ASSERT_FALSE(events.empty());
  int64_t last_step = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    ASSERT_EQ(events[i].sequence(), static_cast<int64_t>(i));
    if (events[i].has_step_record()) {
      ASSERT_EQ(events[i].step_record().step(), last_step + 1) << "at event " << i;
      last_step = events[i].step_record().step();
    }
  }
  EXPECT_EQ(last_step, steps);
  ASSERT_TRUE(events.back().has_state());
  EXPECT_EQ(events.back().state().state(), v1::SUCCEEDED);
}

TEST_F(EndedJobsTest, EndedJobsLeaveMemoryAndReplayFromTheStoreEveryEventOnce) {
  Open(/*cache_bytes=*/0);
  // 600 steps: with evaluations and state changes, three pages of history.
  const std::vector<std::string> ids = {Create(600, 1), Create(40, 2), Create(600, 3)};
  WaitUntilOnlyInTheStore(ids);

  auto all = store_->LoadJobs();
  ASSERT_TRUE(all.ok());
  for (size_t j = 0; j < ids.size(); ++j) {
    SCOPED_TRACE(ids[j]);
    const int steps = j == 1 ? 40 : 600;
    const std::vector<v1::MetricsEvent> replay = Replay(ids[j]);
    ExpectWholeHistory(replay, steps);
    EXPECT_EQ(manager_->HistorySize(ids[j]), replay.size());
    if (steps == 600) {
      EXPECT_GT(replay.size(), 2 * 256u);
    }
    // Byte for byte what was stored (and streamed while it ran).
    for (const StoredJob& s : *all) {
      if (s.job.id() != ids[j]) continue;
      ASSERT_EQ(s.events.size(), replay.size());
      for (size_t i = 0; i < replay.size(); ++i) {
        ASSERT_EQ(s.events[i].SerializeAsString(), replay[i].SerializeAsString()) << i;
      }
    }
    // Larger reads cross page boundaries the same way.
    const std::vector<v1::MetricsEvent> big = Replay(ids[j], 0, 1000);
    ASSERT_EQ(big.size(), replay.size());
    EXPECT_EQ(big.back().SerializeAsString(), replay.back().SerializeAsString());

    // Resuming after a step record: exactly what follows it.
    for (int64_t since : {int64_t{1}, int64_t{25}, int64_t{steps}}) {
      size_t k = 0;
      while (!(replay[k].has_step_record() && replay[k].step_record().step() == since)) ++k;
      const std::vector<v1::MetricsEvent> rest = Replay(ids[j], since);
      ASSERT_EQ(rest.size(), replay.size() - k - 1) << since;
      EXPECT_EQ(rest.front().sequence(), static_cast<int64_t>(k + 1)) << since;
    }
    // Beyond the end: the final state alone (a stream always ends with it).
    const std::vector<v1::MetricsEvent> beyond = Replay(ids[j], 1'000'000);
    ASSERT_EQ(beyond.size(), 1u);
    EXPECT_TRUE(beyond[0].has_state());
  }
  EXPECT_EQ(manager_->JobsInMemory(), 0u);
  EXPECT_EQ(manager_->ended_job_cache().entries(), 0u);  // a 0-byte cache keeps nothing
}

TEST_F(EndedJobsTest, RequestsAboutEndedJobsAreAnsweredFromTheStore) {
  Open(/*cache_bytes=*/0);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Create(5, i, "req-" + std::to_string(i)));
  WaitUntilOnlyInTheStore(ids);

  absl::StatusOr<v1::Job> got = manager_->Get("jobs/" + ids[2]);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id(), ids[2]);
  EXPECT_EQ(got->state(), v1::SUCCEEDED);
  EXPECT_EQ(got->progress().step(), 5);
  EXPECT_EQ(manager_->Get("j000000000000").status().code(), absl::StatusCode::kNotFound);

  // Newest first, in pages, with a state filter.
  std::vector<std::string> listed;
  std::string token;
  do {
    absl::StatusOr<JobManager::Page> page = manager_->List({v1::SUCCEEDED}, 2, token);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const v1::Job& j : page->jobs) listed.push_back(j.id());
    token = page->next_page_token;
  } while (!token.empty());
  EXPECT_EQ(listed, (std::vector<std::string>{ids[4], ids[3], ids[2], ids[1], ids[0]}));
  EXPECT_TRUE(manager_->List({v1::FAILED}, 10, "")->jobs.empty());
  EXPECT_EQ(manager_->List({}, 10, "", std::string("bob"))->jobs.size(), 0u);
  EXPECT_EQ(manager_->List({}, 10, "", std::string("alice"))->jobs.size(), 5u);

  EXPECT_EQ(manager_->Cancel(ids[0]).status().code(), absl::StatusCode::kFailedPrecondition);

  // A retry with the same request id is the same job; another spec is refused.
  absl::StatusOr<v1::Job> retry = manager_->Create(Spec(5, 1), "req-1", "alice");
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(retry->id(), ids[1]);
  absl::StatusOr<v1::Job> other = manager_->Create(Spec(6, 1), "req-1", "alice");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().ToString().find("request_id"), std::string::npos) << other.status();
  EXPECT_EQ(manager_->JobsInMemory(), 0u);  // answering them loaded nothing for good

  JobsSnapshot m = manager_->MetricsSnapshot();
  EXPECT_EQ(m.by_state["SUCCEEDED"], 5);
  EXPECT_EQ(m.jobs_in_memory, 0);

  std::filesystem::create_directories(dir_ + "/tensorboard/" + ids[3]);
  ASSERT_TRUE(manager_->Delete(ids[3]).ok());
  EXPECT_EQ(manager_->Get(ids[3]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Delete(ids[3]).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/tensorboard/" + ids[3]));
  EXPECT_FALSE(store_->GetJob(ids[3])->has_value());
  EXPECT_EQ(manager_->MetricsSnapshot().by_state["SUCCEEDED"], 4);
}

TEST_F(EndedJobsTest, ARestartLoadsOnlyWhatIsActive) {
  Open(/*cache_bytes=*/1 << 20);
  std::vector<std::string> ended;
  for (int i = 0; i < 6; ++i) ended.push_back(Create(5, i));
  WaitUntilOnlyInTheStore(ended);
  const std::string running = Create(10'000'000, 9);
  const std::string queued = Create(5, 10);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (manager_->Get(running)->state() != v1::RUNNING &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  manager_->Shutdown();

  Open(/*cache_bytes=*/0);
  EXPECT_EQ(manager_->JobsInMemory(), 2u);  // the two it resumes, nothing else
  JobsSnapshot m = manager_->MetricsSnapshot();
  EXPECT_EQ(m.by_state["SUCCEEDED"], 6);
  EXPECT_EQ(manager_->List({}, 100, "")->jobs.size(), 8u);
  for (const std::string& id : ended) ExpectWholeHistory(Replay(id), 5);
  EXPECT_EQ(manager_->JobsInMemory(), 2u);
  // New jobs still get sequences after the old ones: newest first stays true.
  ASSERT_TRUE(manager_->Cancel(running).ok());
  const std::string later = Create(5, 11);
  EXPECT_EQ(manager_->List({}, 1, "")->jobs[0].id(), later);
}

TEST_F(EndedJobsTest, ADeleteRacingReadsLeavesNothingBehind) {
  Open(/*cache_bytes=*/1 << 20);  // cached: a read racing the delete must not re-cache it
  const std::vector<std::string> ids = {Create(300, 1), Create(300, 2)};
  WaitUntilOnlyInTheStore(ids);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        for (const std::string& id : ids) {
          size_t c = 0;
          std::vector<grpc::Slice> wire;
          bool terminal = false;
          while (!terminal && manager_->ReadWire(id, c, 64, &wire, &terminal, nullptr).ok()) {
            c = wire.size();
          }
          wire.clear();
          (void)manager_->Get(id);
        }
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(manager_->Delete(ids[0]).ok());
  std::this_thread::sleep_for(milliseconds(100));
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(manager_->Get(ids[0]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->HistorySize(ids[0]), 0u);
  EXPECT_EQ(manager_->StartCursor(ids[0], 0).status().code(), absl::StatusCode::kNotFound);
  ExpectWholeHistory(Replay(ids[1]), 300);
  EXPECT_EQ(manager_->List({}, 10, "")->jobs.size(), 1u);
}

}  // namespace
}  // namespace ampd::server
