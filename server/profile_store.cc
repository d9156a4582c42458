#include "server/profile_store.h"

#include "absl/strings/str_cat.h"

namespace ampd::server {

ProfileStore::ProfileStore(JobStore* store) : store_(store) {
  if (store_ == nullptr) return;
  auto loaded = store_->LoadProfiles();
  if (!loaded.ok()) return;
  for (auto& [id, p] : *loaded) profiles_[id] = std::move(p);
}

absl::Status ProfileStore::Create(const std::string& id,
                                  const ampd::v1::PrecisionProfile& profile) {
  std::lock_guard<std::mutex> lock(mu_);
  if (profiles_.count(id)) {
    return absl::AlreadyExistsError(absl::StrCat("profile \"", id, "\" already exists"));
  }
  if (store_ != nullptr) {
    if (absl::Status s = store_->PutProfile(id, profile); !s.ok()) return s;
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
  if (profiles_.erase(id) == 0) return false;
  if (store_ != nullptr) store_->DeleteProfile(id).IgnoreError();
  return true;
}

}  // namespace ampd::server
