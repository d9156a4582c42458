#include "server/jobs/persister.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace ampd::server::jobs {
namespace {

namespace v1 = ::ampd::v1;

// The store's view: each job's record and history; writes can be made to fail.
class MemoryStore : public JobStore {
 public:
  absl::Status PutJob(const v1::Job& job, int64_t sequence) override {
    std::lock_guard<std::mutex> lock(mu);
    if (fail) return absl::UnavailableError("disk on fire");
    jobs[job.id()] = job;
    return absl::OkStatus();
  }
  absl::Status AppendEvents(const std::string& id, int64_t first,
                            const std::vector<v1::MetricsEvent>& events) override {
    std::lock_guard<std::mutex> lock(mu);
    if (fail) return absl::UnavailableError("disk on fire");
    std::vector<v1::MetricsEvent>& h = history[id];
    if (first != static_cast<int64_t>(h.size())) return absl::InternalError("gap in history");
    h.insert(h.end(), events.begin(), events.end());
    return absl::OkStatus();
  }
  absl::Status TruncateEvents(const std::string&, int64_t) override { return absl::OkStatus(); }
  absl::Status DeleteJob(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    jobs.erase(id);
    history.erase(id);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<StoredJob>> LoadJobs() override { return std::vector<StoredJob>{}; }
  // The persister only writes: the queries are not part of this test.
  absl::StatusOr<std::vector<StoredJob>> LoadUnfinishedJobs() override { return LoadJobs(); }
  absl::StatusOr<std::optional<StoredJob>> GetJob(const std::string&) override {
    return std::nullopt;
  }
  absl::StatusOr<std::optional<StoredJob>> FindByRequestId(const std::string&,
                                                           const std::string&) override {
    return std::nullopt;
  }
  absl::StatusOr<std::vector<StoredJob>> ListJobs(const JobFilter&) override { return LoadJobs(); }
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> EndedJobs(int64_t,
                                                                         int64_t) override {
    return std::vector<std::pair<std::string, int64_t>>{};
  }
  absl::StatusOr<std::vector<std::string>> JobIds() override { return std::vector<std::string>{}; }
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountByState() override {
    return std::map<v1::JobState, int64_t>{};
  }
  absl::StatusOr<int64_t> MaxSequence() override { return 0; }
  absl::StatusOr<std::vector<std::string>> ReadEvents(const std::string&, int64_t,
                                                      int64_t) override {
    return std::vector<std::string>{};
  }
  absl::StatusOr<std::vector<std::pair<int64_t, v1::MetricsEvent>>> EventsAtStep(const std::string&,
                                                                                 int64_t) override {
    return std::vector<std::pair<int64_t, v1::MetricsEvent>>{};
  }
  absl::StatusOr<int64_t> FirstEventAfterStep(const std::string&, int64_t) override { return 0; }
  absl::Status PutProfile(const std::string&, const v1::PrecisionProfile&) override {
    return absl::OkStatus();
  }
  absl::Status DeleteProfile(const std::string&) override { return absl::OkStatus(); }
  absl::StatusOr<std::vector<std::pair<std::string, v1::PrecisionProfile>>> LoadProfiles()
      override {
    return std::vector<std::pair<std::string, v1::PrecisionProfile>>{};
  }
  size_t events(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    return history[id].size();
  }

  std::mutex mu;
  std::atomic<bool> fail{false};
  std::map<std::string, v1::Job> jobs;
  std::map<std::string, std::vector<v1::MetricsEvent>> history;
};

// One job as the manager keeps it: its history and how much is written.
struct Record {
  std::mutex mu;
  std::vector<v1::MetricsEvent> events;
  size_t written = 0;
  void Add(int step) {
    std::lock_guard<std::mutex> lock(mu);
    v1::MetricsEvent e;
    e.mutable_step_record()->set_step(step);
    events.push_back(e);
  }
  PersisterHooks Hooks() {
    return {[this] {
              std::lock_guard<std::mutex> lock(mu);
              std::vector<PendingWrite> out;
              if (written == events.size()) return out;
              PendingWrite w;
              w.id = "j";
              w.job.set_id("j");
              w.first_index = written;
              w.events.assign(events.begin() + written, events.end());
              out.push_back(std::move(w));
              written = events.size();
              return out;
            },
            [this](const PendingWrite& w) {
              std::lock_guard<std::mutex> lock(mu);
              written = std::min(written, w.first_index);
            },
            [this](const PendingWrite& w) {
              std::lock_guard<std::mutex> lock(mu);
              confirmed = std::max(confirmed, w.first_index + w.events.size());
            }};
  }
  size_t confirmed = 0;  // events the store has, as the written hook told
};

TEST(PersisterTest, FlushWritesNowAndTheThreadWritesByItself) {
  MemoryStore store;
  Record r;
  Persister p(&store, r.Hooks(), std::chrono::hours(1));
  r.Add(1);
  r.Add(2);
  p.Flush();
  EXPECT_EQ(store.events("j"), 2u);
  EXPECT_EQ(store.jobs.count("j"), 1u);

  Record r2;
  MemoryStore store2;
  Persister periodic(&store2, r2.Hooks(), std::chrono::milliseconds(5));
  r2.Add(1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store2.events("j") < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(store2.events("j"), 1u);  // nobody called Flush
}

TEST(PersisterTest, AFailedWriteIsRetriedFromWhereItFailed) {
  MemoryStore store;
  Record r;
  Persister p(&store, r.Hooks(), std::chrono::hours(1));
  r.Add(1);
  p.Flush();
  store.fail = true;
  r.Add(2);
  r.Add(3);
  p.Flush();
  EXPECT_EQ(p.failed_writes(), 1);
  EXPECT_EQ(store.events("j"), 1u);
  store.fail = false;
  r.Add(4);
  p.Flush();  // events 2..4 in one go, no gap (the store would refuse one)
  EXPECT_EQ(store.events("j"), 4u);
  EXPECT_EQ(store.history["j"][3].step_record().step(), 4);
}

TEST(PersisterTest, OnlyWritesThatSucceededAreConfirmed) {
  // The job manager lets an ended job leave memory on this confirmation, so
  // a failed write must never give one.
  MemoryStore store;
  Record r;
  Persister p(&store, r.Hooks(), std::chrono::hours(1));
  r.Add(1);
  p.Flush();
  EXPECT_EQ(r.confirmed, 1u);
  store.fail = true;
  r.Add(2);
  p.Flush();
  EXPECT_EQ(r.confirmed, 1u);
  store.fail = false;
  p.Flush();
  EXPECT_EQ(r.confirmed, 2u);
}

TEST(PersisterTest, StopWritesWhatIsLeftAndDeletesGoThroughIt) {
  MemoryStore store;
  Record r;
  {
    Persister p(&store, r.Hooks(), std::chrono::hours(1));
    r.Add(1);
    p.Stop();
    EXPECT_EQ(store.events("j"), 1u);
    p.Stop();  // idempotent
    EXPECT_TRUE(p.DeleteJob("j").ok());
    EXPECT_EQ(store.jobs.count("j"), 0u);
  }
}

}  // namespace
}  // namespace ampd::server::jobs
