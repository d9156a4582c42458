#include "server/uploads.h"

#include <cctype>
#include <cstdio>
#include <filesystem>

namespace ampd::server {

std::string UploadDir(const std::string& data_root, const std::string& principal) {
  bool plain = !principal.empty() && principal != "." && principal != "..";
  for (char c : principal) {
    plain &= std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  }
  std::string name = principal;
  if (!plain) {
    name = "x";
    char hex[3];
    for (unsigned char c : principal) {
      std::snprintf(hex, sizeof hex, "%02x", c);
      name += hex;
    }
  }
  return data_root + "/uploads/" + name;
}

std::string ResolveDataPath(const std::string& data_root, const std::string& owner,
                            const std::string& spec_path) {
  const std::string prefix = "uploads/";
  if (spec_path.rfind(prefix, 0) == 0) {
    return UploadDir(data_root, owner) + "/" + spec_path.substr(prefix.size());
  }
  return data_root + "/" + spec_path;
}

int64_t UploadBytesUsed(const std::string& data_root, const std::string& principal) {
  int64_t used = 0;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(UploadDir(data_root, principal), ec)) {
    if (e.is_regular_file(ec)) used += static_cast<int64_t>(e.file_size(ec));
  }
  return used;
}

}  // namespace ampd::server
