#ifndef AMPD_SERVER_JOB_STORE_H_
#define AMPD_SERVER_JOB_STORE_H_

// Where jobs, their metric history and precision profiles are kept across
// restarts. An interface, so a shared server database can back several ampd
// replicas later; the default is SQLite under --data_dir.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ampd/v1/precision_service.pb.h"
#include "ampd/v1/training_service.pb.h"

namespace ampd::server {

struct StoredJob {
  ampd::v1::Job job;
  int64_t sequence = 0;
  std::vector<ampd::v1::MetricsEvent> events;  // in order
};

class JobStore {
 public:
  virtual ~JobStore() = default;
  // Inserts or replaces the job's record.
  virtual absl::Status PutJob(const ampd::v1::Job& job, int64_t sequence) = 0;
  // Appends events starting at index `first_index` of the job's history.
  virtual absl::Status AppendEvents(const std::string& job_id, int64_t first_index,
                                    const std::vector<ampd::v1::MetricsEvent>& events) = 0;
  // Drops the job's events from index `from_index` on (a resumed job re-runs them).
  virtual absl::Status TruncateEvents(const std::string& job_id, int64_t from_index) = 0;
  virtual absl::Status DeleteJob(const std::string& job_id) = 0;
  virtual absl::StatusOr<std::vector<StoredJob>> LoadJobs() = 0;

  virtual absl::Status PutProfile(const std::string& id, const ampd::v1::PrecisionProfile& p) = 0;
  virtual absl::Status DeleteProfile(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<std::pair<std::string, ampd::v1::PrecisionProfile>>>
  LoadProfiles() = 0;
};

// SQLite in WAL mode at `path`, created (with its schema) if missing and
// migrated to the current schema version if older.
absl::StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path);
inline constexpr int kSchemaVersion = 1;

}  // namespace ampd::server

#endif  // AMPD_SERVER_JOB_STORE_H_
