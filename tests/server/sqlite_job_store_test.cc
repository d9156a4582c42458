#include <sqlite3.h>

#include <cstdlib>

#include "gtest/gtest.h"
#include "server/job_store.h"

namespace ampd::server {
namespace {

namespace v1 = ::ampd::v1;

std::string DbPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

v1::MetricsEvent StepEvent(int64_t step) {
  v1::MetricsEvent e;
  e.set_step(step);
  e.mutable_step_record()->set_step(step);
  e.mutable_step_record()->set_loss(1.0 / step);
  return e;
}

TEST(SqliteJobStoreTest, JobsEventsAndProfilesRoundTrip) {
  const std::string path = DbPath("roundtrip.db");
  {
    auto store = OpenSqliteJobStore(path);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::Job job;
    job.set_id("j1");
    job.set_state(v1::RUNNING);
    ASSERT_TRUE((*store)->PutJob(job, 7).ok());
    job.set_state(v1::SUCCEEDED);
    ASSERT_TRUE((*store)->PutJob(job, 7).ok());  // replaces
    ASSERT_TRUE((*store)->AppendEvents("j1", 0, {StepEvent(1), StepEvent(2), StepEvent(3)}).ok());
    ASSERT_TRUE((*store)->TruncateEvents("j1", 2).ok());
    ASSERT_TRUE((*store)->AppendEvents("j1", 2, {StepEvent(30)}).ok());
    v1::Job other;
    other.set_id("j2");
    ASSERT_TRUE((*store)->PutJob(other, 8).ok());
    ASSERT_TRUE((*store)->DeleteJob("j2").ok());
    v1::PrecisionProfile p;
    p.mutable_config()->set_base("O2");
    ASSERT_TRUE((*store)->PutProfile("mine", p).ok());
  }
  auto store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].job.state(), v1::SUCCEEDED);
  EXPECT_EQ((*jobs)[0].sequence, 7);
  ASSERT_EQ((*jobs)[0].events.size(), 3u);
  EXPECT_EQ((*jobs)[0].events[2].step(), 30);
  auto profiles = (*store)->LoadProfiles();
  ASSERT_TRUE(profiles.ok());
  ASSERT_EQ(profiles->size(), 1u);
  EXPECT_EQ((*profiles)[0].second.config().base(), "O2");
}

v1::Job JobIn(const std::string& id, v1::JobState state, const std::string& owner = "",
              const std::string& request_id = "", int64_t end_s = 0) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.set_owner(owner);
  job.set_request_id(request_id);
  if (end_s > 0) job.mutable_end_time()->set_seconds(end_s);
  return job;
}

std::vector<std::string> Ids(const std::vector<StoredJob>& jobs) {
  std::vector<std::string> ids;
  for (const StoredJob& j : jobs) ids.push_back(j.job.id());
  return ids;
}

TEST(SqliteJobStoreTest, QueriesEndedJobsWithoutLoadingEverything) {
  auto store = OpenSqliteJobStore(DbPath("queries.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  JobStore& s = **store;
  ASSERT_TRUE(s.PutJob(JobIn("a", v1::SUCCEEDED, "alice", "r1", 300), 1).ok());
  ASSERT_TRUE(s.PutJob(JobIn("b", v1::FAILED, "bob", "", 100), 2).ok());
  ASSERT_TRUE(s.PutJob(JobIn("c", v1::RUNNING, "alice"), 3).ok());
  ASSERT_TRUE(s.PutJob(JobIn("d", v1::CANCELLED, "alice", "r2", 200), 4).ok());
  ASSERT_TRUE(
      s.AppendEvents("a", 0, {StepEvent(1), StepEvent(2), StepEvent(2), StepEvent(3)}).ok());
  ASSERT_TRUE(s.AppendEvents("c", 0, {StepEvent(1)}).ok());

  auto unfinished = s.LoadUnfinishedJobs();
  ASSERT_TRUE(unfinished.ok());
  ASSERT_EQ(Ids(*unfinished), std::vector<std::string>{"c"});
  EXPECT_EQ((*unfinished)[0].events.size(), 1u);

  auto a = s.GetJob("a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->event_count, 4);
  EXPECT_TRUE((*a)->events.empty());
  EXPECT_EQ((*a)->sequence, 1);
  auto none = s.GetJob("zz");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto by_request = s.FindByRequestId("alice", "r2");
  ASSERT_TRUE(by_request.ok() && by_request->has_value());
  EXPECT_EQ((*by_request)->job.id(), "d");
  EXPECT_FALSE(s.FindByRequestId("bob", "r2")->has_value());  // request ids are per owner
  EXPECT_FALSE(s.FindByRequestId("bob", "")->has_value());

  JobFilter f;
  f.limit = 10;
  EXPECT_EQ(Ids(*s.ListJobs(f)), (std::vector<std::string>{"d", "c", "b", "a"}));
  f.owner = "alice";
  EXPECT_EQ(Ids(*s.ListJobs(f)), (std::vector<std::string>{"d", "c", "a"}));
  f.states = {v1::SUCCEEDED, v1::CANCELLED};
  EXPECT_EQ(Ids(*s.ListJobs(f)), (std::vector<std::string>{"d", "a"}));
  f.before_sequence = 4;
  f.limit = 1;
  EXPECT_EQ(Ids(*s.ListJobs(f)), std::vector<std::string>{"a"});

  auto ended = s.EndedJobs(INT64_MAX, 10);
  ASSERT_TRUE(ended.ok());
  ASSERT_EQ(ended->size(), 3u);  // oldest end first; the running job is not one
  EXPECT_EQ((*ended)[0].first, "b");
  EXPECT_EQ((*ended)[0].second, 100'000'000'000);
  EXPECT_EQ((*ended)[2].first, "a");
  EXPECT_EQ(s.EndedJobs(250'000'000'000, 10)->size(), 2u);
  EXPECT_EQ(s.EndedJobs(INT64_MAX, 1)->size(), 1u);

  auto counts = s.CountByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[v1::SUCCEEDED], 1);
  EXPECT_EQ((*counts)[v1::RUNNING], 1);
  EXPECT_EQ(*s.MaxSequence(), 4);
  EXPECT_EQ(s.JobIds()->size(), 4u);

  auto page = s.ReadEvents("a", 1, 2);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 2u);
  v1::MetricsEvent e;
  ASSERT_TRUE(e.ParseFromString((*page)[1]));
  EXPECT_EQ(e.step(), 2);
  EXPECT_EQ(s.ReadEvents("a", 3, 100)->size(), 1u);  // fewer at the end
  EXPECT_TRUE(s.ReadEvents("a", 9, 100)->empty());

  auto at = s.EventsAtStep("a", 2);
  ASSERT_TRUE(at.ok());
  ASSERT_EQ(at->size(), 2u);
  EXPECT_EQ((*at)[0].first, 1);
  EXPECT_EQ((*at)[1].first, 2);
  EXPECT_EQ(*s.FirstEventAfterStep("a", 2), 3);
  EXPECT_EQ(*s.FirstEventAfterStep("a", 0), 0);
  EXPECT_EQ(*s.FirstEventAfterStep("a", 3), 4);  // none: the length
  EXPECT_EQ(*s.FirstEventAfterStep("b", 3), 0);  // no history at all
}

TEST(SqliteJobStoreTest, AVersionOneStoreIsUpgradedWithItsJobsQueryable) {
  const std::string path = DbPath("v1.db");
  {
    // The schema as ampd 0.1 wrote it, with one ended job.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE schema_version(version INTEGER NOT NULL);"
                           "INSERT INTO schema_version VALUES(1);"
                           "CREATE TABLE jobs(id TEXT PRIMARY KEY, sequence INTEGER NOT NULL, "
                           "job BLOB NOT NULL);"
                           "CREATE TABLE events(job_id TEXT NOT NULL, idx INTEGER NOT NULL, "
                           "step INTEGER NOT NULL, event BLOB NOT NULL, PRIMARY KEY(job_id, idx));"
                           "CREATE TABLE profiles(id TEXT PRIMARY KEY, profile BLOB NOT NULL);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO jobs VALUES('old', 5, ?)", -1, &q, nullptr),
              SQLITE_OK);
    const std::string blob = JobIn("old", v1::SUCCEEDED, "carol", "req", 50).SerializeAsString();
    sqlite3_bind_blob(q, 1, blob.data(), blob.size(), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
  }
  auto store = OpenSqliteJobStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto found = (*store)->FindByRequestId("carol", "req");
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->job.id(), "old");
  auto ended = (*store)->EndedJobs(INT64_MAX, 10);
  ASSERT_TRUE(ended.ok());
  ASSERT_EQ(ended->size(), 1u);
  EXPECT_EQ((*ended)[0].second, 50'000'000'000);
  EXPECT_TRUE((*store)->LoadUnfinishedJobs()->empty());
}

TEST(SqliteJobStoreTest, SchemaIsVersionedAndANewerOneIsRefused) {
  const std::string path = DbPath("version.db");
  ASSERT_TRUE(OpenSqliteJobStore(path).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT version FROM schema_version", -1, &q, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(q), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(q, 0), kSchemaVersion);
  sqlite3_finalize(q);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 99", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = OpenSqliteJobStore(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(std::string(store.status().message()).find("newer than this ampd"), std::string::npos)
      << store.status();
}

TEST(SqliteJobStoreTest, AnUnopenableFileIsAClearError) {
  auto store = OpenSqliteJobStore("/nonexistent-dir/ampd.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(std::string(store.status().message()).find("/nonexistent-dir/ampd.db"),
            std::string::npos);
}

}  // namespace
}  // namespace ampd::server
