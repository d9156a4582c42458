#ifndef AMPD_SERVER_PROFILE_STORE_H_
#define AMPD_SERVER_PROFILE_STORE_H_

// User-defined precision profiles, by id. Built-in modes are not stored here;
// their names (and aliases) cannot be taken by a user profile.

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ampd/v1/precision_service.pb.h"
#include "server/job_store.h"

namespace ampd::server {

class ProfileStore {
 public:
  // With a store, profiles are loaded from it and every change is saved.
  explicit ProfileStore(JobStore* store = nullptr);
  absl::Status Create(const std::string& id, const ampd::v1::PrecisionProfile& profile);
  std::optional<ampd::v1::PrecisionProfile> Get(const std::string& id) const;
  std::vector<ampd::v1::PrecisionProfile> List() const;
  bool Delete(const std::string& id);

 private:
  JobStore* store_;
  mutable std::mutex mu_;
  std::map<std::string, ampd::v1::PrecisionProfile> profiles_;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_PROFILE_STORE_H_
