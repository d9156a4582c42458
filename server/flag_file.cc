#include "server/flag_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ampd::server {

absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ampd::server
