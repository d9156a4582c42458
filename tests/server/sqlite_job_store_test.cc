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
