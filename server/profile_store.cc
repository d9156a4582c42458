#include "server/profile_store.h"

#include "absl/strings/str_cat.h"

namespace ampd::server {

absl::Status ProfileStore::Create(const std::string& id, const ampd::v1::PrecisionProfile& profile) {
  std::lock_guard<std::mutex> lock(mu_);
  if (profiles_.count(id)) {
    return absl::AlreadyExistsError(absl::StrCat("profile \"", id, "\" already exists"));
  }
  profiles_[id] = profile;
  return absl::OkStatus();
}

std::optional<ampd::v1::PrecisionProfile> ProfileStore::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = profiles_.find(id);
  if (it == profiles_.end()) return std::nullopt;
  return it->second;
}

std::vector<ampd::v1::PrecisionProfile> ProfileStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ampd::v1::PrecisionProfile> out;
  for (const auto& [id, p] : profiles_) out.push_back(p);
  return out;
}

bool ProfileStore::Delete(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return profiles_.erase(id) > 0;
}

}  // namespace ampd::server
