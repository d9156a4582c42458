#ifndef AMPD_ENGINE_IO_ERRNO_STATUS_H_
#define AMPD_ENGINE_IO_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"

namespace ampd::engine::io {

// An error status for a failed system call: "WHAT PATH: <strerror(err)>", with
// a code that follows errno (ENOENT -> NotFound, EACCES -> PermissionDenied,
// ENOSPC/EFBIG -> ResourceExhausted, ...).
absl::Status ErrnoStatus(int err, const std::string& what, const std::string& path);

}  // namespace ampd::engine::io

#endif  // AMPD_ENGINE_IO_ERRNO_STATUS_H_
