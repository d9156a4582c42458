#ifndef AMPD_SERVER_JOB_STORE_H_
#define AMPD_SERVER_JOB_STORE_H_

// Where jobs, their metric history and precision profiles are kept across
// restarts. An interface, so a shared server database can back several ampd
// replicas later; the default is SQLite under --data_dir.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ampd/v1/precision_service.pb.h"
#include "ampd/v1/training_service.pb.h"

namespace ampd::server {

struct StoredJob {
  ampd::v1::Job job;
  int64_t sequence = 0;
  std::vector<ampd::v1::MetricsEvent> events;  // in order (LoadJobs, LoadUnfinishedJobs)
  int64_t event_count = 0;  // the history's length (GetJob and the loads; 0 elsewhere)
};

// Which jobs ListJobs returns: newest (highest sequence) first.
struct JobFilter {
  std::vector<ampd::v1::JobState> states;  // empty: any
  std::optional<std::string> owner;        // nullopt: anyone's
  int64_t before_sequence = INT64_MAX;     // only jobs created before this one
  int limit = 50;
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
  // Everything, histories included (tests and tools; ampd itself reads by
  // the queries below, so that ended jobs stay on disk).
  virtual absl::StatusOr<std::vector<StoredJob>> LoadJobs() = 0;

  // Jobs not yet ended (queued, running, cancelling when ampd stopped), with
  // their histories: what a restart resumes.
  virtual absl::StatusOr<std::vector<StoredJob>> LoadUnfinishedJobs() = 0;
  // One job without its history (event_count set); nullopt if absent.
  virtual absl::StatusOr<std::optional<StoredJob>> GetJob(const std::string& job_id) = 0;
  // The job `owner` created with `request_id`, if any (no history, no count).
  virtual absl::StatusOr<std::optional<StoredJob>> FindByRequestId(
      const std::string& owner, const std::string& request_id) = 0;
  virtual absl::StatusOr<std::vector<StoredJob>> ListJobs(const JobFilter& filter) = 0;
  // Ended jobs (SUCCEEDED, FAILED, CANCELLED) that ended before
  // `ended_before_ns` (ns since the epoch): id and end time, oldest first, at
  // most `limit` (retention).
  virtual absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> EndedJobs(
      int64_t ended_before_ns, int64_t limit) = 0;
  // The id of every stored job (the start-up sweep of orphaned files).
  virtual absl::StatusOr<std::vector<std::string>> JobIds() = 0;
  // How many stored jobs are in each state, and the highest sequence (0: none).
  virtual absl::StatusOr<std::map<ampd::v1::JobState, int64_t>> CountByState() = 0;
  virtual absl::StatusOr<int64_t> MaxSequence() = 0;

  // The job's events [first, first + max) as stored (serialized MetricsEvent
  // messages), in order; fewer at the end of the history.
  virtual absl::StatusOr<std::vector<std::string>> ReadEvents(const std::string& job_id,
                                                              int64_t first, int64_t max) = 0;
  // The events whose step is `step`, with their indexes, in order.
  virtual absl::StatusOr<std::vector<std::pair<int64_t, ampd::v1::MetricsEvent>>> EventsAtStep(
      const std::string& job_id, int64_t step) = 0;
  // The index of the first event whose step is beyond `step` (the history's
  // length if none is).
  virtual absl::StatusOr<int64_t> FirstEventAfterStep(const std::string& job_id, int64_t step) = 0;

  virtual absl::Status PutProfile(const std::string& id, const ampd::v1::PrecisionProfile& p) = 0;
  virtual absl::Status DeleteProfile(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<std::pair<std::string, ampd::v1::PrecisionProfile>>>
  LoadProfiles() = 0;
};

// SQLite in WAL mode at `path`, created (with its schema) if missing and
// migrated to the current schema version if older.
absl::StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path);
inline constexpr int kSchemaVersion = 2;

}  // namespace ampd::server

#endif  // AMPD_SERVER_JOB_STORE_H_
