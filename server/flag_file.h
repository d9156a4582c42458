#ifndef AMPD_SERVER_FLAG_FILE_H_
#define AMPD_SERVER_FLAG_FILE_H_

// The whole of a file that a command-line flag names (a PEM, the tokens
// file): NOT_FOUND "FLAG: cannot read PATH" when it cannot be read.

#include <string>

#include "absl/status/statusor.h"

namespace ampd::server {

absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path);

}  // namespace ampd::server

#endif  // AMPD_SERVER_FLAG_FILE_H_
