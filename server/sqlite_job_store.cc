#include <sqlite3.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "server/job_store.h"

namespace ampd::server {
namespace {

namespace v1 = ::ampd::v1;

constexpr const char* kEndedStates = "(4, 5, 6)";  // SUCCEEDED, FAILED, CANCELLED
static_assert(v1::SUCCEEDED == 4 && v1::FAILED == 5 && v1::CANCELLED == 6);

int64_t EndTimeNs(const v1::Job& job) {
  return job.has_end_time()
             ? google::protobuf::util::TimeUtil::TimestampToNanoseconds(job.end_time())
             : 0;
}

// Each entry upgrades the schema from version i to i + 1. Never edit a
// released entry; append a new one.
const char* const kMigrations[] = {
    // 0 -> 1
    "CREATE TABLE jobs(id TEXT PRIMARY KEY, sequence INTEGER NOT NULL, job BLOB NOT NULL);"
    "CREATE TABLE events(job_id TEXT NOT NULL, idx INTEGER NOT NULL, step INTEGER NOT NULL,"
    "  event BLOB NOT NULL, PRIMARY KEY(job_id, idx));"
    "CREATE TABLE profiles(id TEXT PRIMARY KEY, profile BLOB NOT NULL);",
    // 1 -> 2: what ampd queries ended jobs by, so that they stay on disk
    // (filled from each job's record by Backfill), and events by step.
    "ALTER TABLE jobs ADD COLUMN state INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN request_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN end_time_ns INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX jobs_by_request ON jobs(owner, request_id) WHERE request_id != '';"
    "CREATE INDEX jobs_by_state ON jobs(state, sequence);"
    "CREATE INDEX jobs_by_end ON jobs(state, end_time_ns);"
    "CREATE INDEX events_by_step ON events(job_id, step);",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion);

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void Text(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), s.size(), SQLITE_TRANSIENT);
  }
  void Blob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), s.size(), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  int Step() { return sqlite3_step(stmt_); }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  std::string ColumnBlob(int i) {
    const void* p = sqlite3_column_blob(stmt_, i);
    return std::string(static_cast<const char*>(p), sqlite3_column_bytes(stmt_, i));
  }
  std::string ColumnText(int i) {
    const unsigned char* p = sqlite3_column_text(stmt_, i);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  }
  int64_t ColumnInt(int i) { return sqlite3_column_int64(stmt_, i); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

class SqliteJobStore final : public JobStore {
 public:
  explicit SqliteJobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteJobStore() override { sqlite3_close(db_); }

  absl::Status Init() {
    if (absl::Status s = Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"); !s.ok())
      return s;
    if (absl::Status s =
            Exec("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL);");
        !s.ok()) {
      return s;
    }
    int64_t version = 0;
    {
      Statement q(db_, "SELECT version FROM schema_version");
      if (q.Step() == SQLITE_ROW) version = q.ColumnInt(0);
    }
    if (version > kSchemaVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat(path_, ": the job store has schema version ", version,
                       ", newer than this ampd (", kSchemaVersion, "); use a newer ampd"));
    }
    for (int64_t v = version; v < kSchemaVersion; ++v) {
      std::string sql =
          absl::StrCat("BEGIN;", kMigrations[v],
                       v == 0 ? "INSERT INTO schema_version VALUES(1);"
                              : absl::StrCat("UPDATE schema_version SET version=", v + 1, ";"),
                       "COMMIT;");
      if (absl::Status s = Exec(sql.c_str()); !s.ok()) {
        Exec("ROLLBACK;").IgnoreError();
        return s;
      }
      if (v + 1 == 2) {
        if (absl::Status s = Backfill(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  // Version 2's columns, from the record each job row already holds.
  absl::Status Backfill() {
    std::vector<v1::Job> jobs;
    {
      Statement q(db_, "SELECT job FROM jobs");
      while (q.Step() == SQLITE_ROW) {
        v1::Job j;
        if (j.ParseFromString(q.ColumnBlob(0))) jobs.push_back(std::move(j));
      }
    }
    if (absl::Status s = Exec("BEGIN;"); !s.ok()) return s;
    Statement u(db_,
                "UPDATE jobs SET state = ?, owner = ?, request_id = ?, end_time_ns = ? "
                "WHERE id = ?");
    for (const v1::Job& j : jobs) {
      u.Reset();
      u.Int(1, j.state());
      u.Text(2, j.owner());
      u.Text(3, j.request_id());
      u.Int(4, EndTimeNs(j));
      u.Text(5, j.id());
      if (absl::Status st = Done(u.Step(), "upgrade job " + j.id()); !st.ok()) {
        Exec("ROLLBACK;").IgnoreError();
        return st;
      }
    }
    return Exec("COMMIT;");
  }

  absl::Status PutJob(const v1::Job& job, int64_t sequence) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_,
                "INSERT OR REPLACE INTO jobs(id, sequence, job, state, owner, request_id, "
                "end_time_ns) VALUES(?, ?, ?, ?, ?, ?, ?)");
    s.Text(1, job.id());
    s.Int(2, sequence);
    s.Blob(3, job.SerializeAsString());
    s.Int(4, job.state());
    s.Text(5, job.owner());
    s.Text(6, job.request_id());
    s.Int(7, EndTimeNs(job));
    return Done(s.Step(), "save job " + job.id());
  }

  absl::Status AppendEvents(const std::string& job_id, int64_t first_index,
                            const std::vector<v1::MetricsEvent>& events) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = Exec("BEGIN;"); !s.ok()) return s;
    Statement s(db_, "INSERT OR REPLACE INTO events(job_id, idx, step, event) VALUES(?, ?, ?, ?)");
    for (size_t i = 0; i < events.size(); ++i) {
      s.Reset();
      s.Text(1, job_id);
      s.Int(2, first_index + static_cast<int64_t>(i));
      s.Int(3, events[i].step());
      s.Blob(4, events[i].SerializeAsString());
      if (absl::Status st = Done(s.Step(), "save events of job " + job_id); !st.ok()) {
        Exec("ROLLBACK;").IgnoreError();
        return st;
      }
    }
    return Exec("COMMIT;");
  }

  absl::Status TruncateEvents(const std::string& job_id, int64_t from_index) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "DELETE FROM events WHERE job_id = ? AND idx >= ?");
    s.Text(1, job_id);
    s.Int(2, from_index);
    return Done(s.Step(), "truncate events of job " + job_id);
  }

  absl::Status DeleteJob(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = Exec("BEGIN;"); !s.ok()) return s;
    Statement e(db_, "DELETE FROM events WHERE job_id = ?");
    e.Text(1, job_id);
    absl::Status st = Done(e.Step(), "delete events of job " + job_id);
    Statement j(db_, "DELETE FROM jobs WHERE id = ?");
    j.Text(1, job_id);
    if (st.ok()) st = Done(j.Step(), "delete job " + job_id);
    if (!st.ok()) {
      Exec("ROLLBACK;").IgnoreError();
      return st;
    }
    return Exec("COMMIT;");
  }

  absl::StatusOr<std::vector<StoredJob>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return WithHistories(
        JobsWhere("SELECT id, sequence, job FROM jobs ORDER BY sequence", [](Statement&) {}));
  }

  absl::StatusOr<std::vector<StoredJob>> LoadUnfinishedJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return WithHistories(JobsWhere(absl::StrCat("SELECT id, sequence, job FROM jobs WHERE state "
                                                "NOT IN ",
                                                kEndedStates, " ORDER BY sequence"),
                                   [](Statement&) {}));
  }

  absl::StatusOr<std::optional<StoredJob>> GetJob(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return OneJob(
        "SELECT id, sequence, job FROM jobs WHERE id = ?", [&](Statement& q) { q.Text(1, job_id); },
        /*count_events=*/true);
  }

  absl::StatusOr<std::optional<StoredJob>> FindByRequestId(const std::string& owner,
                                                           const std::string& request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return OneJob(
        "SELECT id, sequence, job FROM jobs WHERE owner = ? AND request_id = ? AND "
        "request_id != ''",
        [&](Statement& q) {
          q.Text(1, owner);
          q.Text(2, request_id);
        });
  }

  absl::StatusOr<std::vector<StoredJob>> ListJobs(const JobFilter& f) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string sql = "SELECT id, sequence, job FROM jobs WHERE sequence < ?";
    if (f.owner) absl::StrAppend(&sql, " AND owner = ?");
    if (!f.states.empty()) {
      std::vector<std::string> states;
      for (v1::JobState s : f.states) states.push_back(std::to_string(static_cast<int>(s)));
      absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(states, ", "), ")");
    }
    absl::StrAppend(&sql, " ORDER BY sequence DESC LIMIT ?");
    return JobsWhere(sql, [&](Statement& q) {
      int i = 1;
      q.Int(i++, f.before_sequence);
      if (f.owner) q.Text(i++, *f.owner);
      q.Int(i++, f.limit);
    });
  }

  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> EndedJobs(int64_t ended_before_ns,
                                                                         int64_t limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, int64_t>> out;
    Statement q(db_, absl::StrCat("SELECT id, end_time_ns FROM jobs WHERE state IN ", kEndedStates,
                                  " AND end_time_ns < ? ORDER BY end_time_ns, sequence LIMIT ?")
                         .c_str());
    q.Int(1, ended_before_ns);
    q.Int(2, limit);
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) out.emplace_back(q.ColumnText(0), q.ColumnInt(1));
    if (rc != SQLITE_DONE) return Error("list ended jobs");
    return out;
  }

  absl::StatusOr<std::vector<std::string>> JobIds() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    Statement q(db_, "SELECT id FROM jobs");
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) out.push_back(q.ColumnText(0));
    if (rc != SQLITE_DONE) return Error("list jobs");
    return out;
  }

  absl::StatusOr<std::map<v1::JobState, int64_t>> CountByState() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<v1::JobState, int64_t> out;
    Statement q(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state");
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      out[static_cast<v1::JobState>(q.ColumnInt(0))] = q.ColumnInt(1);
    }
    if (rc != SQLITE_DONE) return Error("count jobs");
    return out;
  }

  absl::StatusOr<int64_t> MaxSequence() override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement q(db_, "SELECT COALESCE(MAX(sequence), 0) FROM jobs");
    if (q.Step() != SQLITE_ROW) return Error("read the highest job sequence");
    return q.ColumnInt(0);
  }

  absl::StatusOr<std::vector<std::string>> ReadEvents(const std::string& job_id, int64_t first,
                                                      int64_t max) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    Statement q(db_, "SELECT event FROM events WHERE job_id = ? AND idx >= ? ORDER BY idx LIMIT ?");
    q.Text(1, job_id);
    q.Int(2, first);
    q.Int(3, max);
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) out.push_back(q.ColumnBlob(0));
    if (rc != SQLITE_DONE) return Error("read events of job " + job_id);
    return out;
  }

  absl::StatusOr<std::vector<std::pair<int64_t, v1::MetricsEvent>>> EventsAtStep(
      const std::string& job_id, int64_t step) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<int64_t, v1::MetricsEvent>> out;
    Statement q(db_, "SELECT idx, event FROM events WHERE job_id = ? AND step = ? ORDER BY idx");
    q.Text(1, job_id);
    q.Int(2, step);
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      v1::MetricsEvent e;
      if (!e.ParseFromString(q.ColumnBlob(1))) {
        return absl::DataLossError(
            absl::StrCat(path_, ": an event of job ", job_id, " is corrupt"));
      }
      out.emplace_back(q.ColumnInt(0), std::move(e));
    }
    if (rc != SQLITE_DONE) return Error("read events of job " + job_id);
    return out;
  }

  absl::StatusOr<int64_t> FirstEventAfterStep(const std::string& job_id, int64_t step) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement q(db_,
                "SELECT COALESCE((SELECT MIN(idx) FROM events WHERE job_id = ?1 AND step > ?2), "
                "(SELECT COALESCE(MAX(idx) + 1, 0) FROM events WHERE job_id = ?1))");
    q.Text(1, job_id);
    q.Int(2, step);
    if (q.Step() != SQLITE_ROW) return Error("read events of job " + job_id);
    return q.ColumnInt(0);
  }

  absl::Status PutProfile(const std::string& id, const v1::PrecisionProfile& p) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "INSERT OR REPLACE INTO profiles(id, profile) VALUES(?, ?)");
    s.Text(1, id);
    s.Blob(2, p.SerializeAsString());
    return Done(s.Step(), "save profile " + id);
  }

  absl::Status DeleteProfile(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    Statement s(db_, "DELETE FROM profiles WHERE id = ?");
    s.Text(1, id);
    return Done(s.Step(), "delete profile " + id);
  }

  absl::StatusOr<std::vector<std::pair<std::string, v1::PrecisionProfile>>> LoadProfiles()
      override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, v1::PrecisionProfile>> out;
    Statement q(db_, "SELECT id, profile FROM profiles ORDER BY id");
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      v1::PrecisionProfile p;
      if (!p.ParseFromString(q.ColumnBlob(1))) {
        return absl::DataLossError(
            absl::StrCat(path_, ": profile ", q.ColumnText(0), " is corrupt"));
      }
      out.emplace_back(q.ColumnText(0), std::move(p));
    }
    if (rc != SQLITE_DONE) return Error("load profiles");
    return out;
  }

 private:
  // Rows of (id, sequence, job); `bind` binds the statement's parameters.
  // With `count_events`, one more query per row for its history's length
  // (only GetJob needs it). Under mu_.
  template <typename Bind>
  absl::StatusOr<std::vector<StoredJob>> JobsWhere(const std::string& sql, Bind bind,
                                                   bool count_events = false) {
    std::vector<StoredJob> jobs;
    Statement q(db_, sql.c_str());
    if (!q.ok()) return Error("query jobs");
    bind(q);
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      StoredJob j;
      j.sequence = q.ColumnInt(1);
      if (!j.job.ParseFromString(q.ColumnBlob(2))) {
        return absl::DataLossError(absl::StrCat(path_, ": job ", q.ColumnText(0), " is corrupt"));
      }
      jobs.push_back(std::move(j));
    }
    if (rc != SQLITE_DONE) return Error("query jobs");
    if (!count_events) return jobs;
    Statement count(db_, "SELECT COALESCE(MAX(idx) + 1, 0) FROM events WHERE job_id = ?");
    for (StoredJob& j : jobs) {
      count.Reset();
      count.Text(1, j.job.id());
      if (count.Step() != SQLITE_ROW) return Error("count events of job " + j.job.id());
      j.event_count = count.ColumnInt(0);
    }
    return jobs;
  }
  // The jobs with their whole histories. Under mu_.
  absl::StatusOr<std::vector<StoredJob>> WithHistories(
      absl::StatusOr<std::vector<StoredJob>> jobs) {
    if (!jobs.ok()) return jobs;
    Statement ev(db_, "SELECT event FROM events WHERE job_id = ? ORDER BY idx");
    for (StoredJob& j : *jobs) {
      ev.Reset();
      ev.Text(1, j.job.id());
      int rc;
      while ((rc = ev.Step()) == SQLITE_ROW) {
        v1::MetricsEvent e;
        if (!e.ParseFromString(ev.ColumnBlob(0))) {
          return absl::DataLossError(
              absl::StrCat(path_, ": an event of job ", j.job.id(), " is corrupt"));
        }
        j.events.push_back(std::move(e));
      }
      if (rc != SQLITE_DONE) return Error("load events");
      j.event_count = static_cast<int64_t>(j.events.size());
    }
    return jobs;
  }
  template <typename Bind>
  absl::StatusOr<std::optional<StoredJob>> OneJob(const std::string& sql, Bind bind,
                                                  bool count_events = false) {
    absl::StatusOr<std::vector<StoredJob>> jobs = JobsWhere(sql, bind, count_events);
    if (!jobs.ok()) return jobs.status();
    if (jobs->empty()) return std::nullopt;
    return std::move(jobs->front());
  }

  absl::Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string message = err ? err : "unknown error";
      sqlite3_free(err);
      return absl::InternalError(absl::StrCat(path_, ": ", message));
    }
    return absl::OkStatus();
  }
  absl::Status Error(const std::string& what) {
    return absl::InternalError(absl::StrCat(path_, ": cannot ", what, ": ", sqlite3_errmsg(db_)));
  }
  absl::Status Done(int rc, const std::string& what) {
    return rc == SQLITE_DONE ? absl::OkStatus() : Error(what);
  }

  std::mutex mu_;
  sqlite3* db_;
  std::string path_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat(path, ": cannot open the job store: ", message));
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::make_unique<SqliteJobStore>(db, path);
  if (absl::Status s = store->Init(); !s.ok()) return s;
  return std::unique_ptr<JobStore>(std::move(store));
}

}  // namespace ampd::server
