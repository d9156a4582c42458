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

namespace ampd::server {

class ProfileStore {
 public:
  absl::Status Create(const std::string& id, const ampd::v1::PrecisionProfile& profile);
  std::optional<ampd::v1::PrecisionProfile> Get(const std::string& id) const;
  std::vector<ampd::v1::PrecisionProfile> List() const;
  bool Delete(const std::string& id);

 private:
  mutable std::mutex mu_;
  std::map<std::string, ampd::v1::PrecisionProfile> profiles_;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_PROFILE_STORE_H_
