#ifndef AMPD_ENGINE_IO_ATOMIC_FILE_H_
#define AMPD_ENGINE_IO_ATOMIC_FILE_H_

// Crash-safe file replacement: the bytes go to a temporary file beside the
// target (PATH.tmp-XXXXXX), which is fsynced and renamed over PATH, and the
// directory is fsynced so the rename itself is durable. Readers of PATH see
// either the old file or the complete new one, never a partial write; a
// failure (disk full, I/O error, ...) removes the temporary file and leaves
// PATH as it was.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/io/errno_status.h"
#include "engine/io/sha256.h"

namespace ampd::engine::io {

class AtomicFileWriter {
 public:
  // Creates the temporary file (mode 0666 less the umask) in PATH's directory.
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path);
  ~AtomicFileWriter();  // Abort()s unless committed

  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Writes all `size` bytes (retrying short writes and EINTR). After a
  // failure every later call fails too.
  absl::Status Append(const void* data, size_t size);
  // fsync + close the temporary file, rename it to PATH, fsync the directory.
  absl::Status Commit();
  // Removes the temporary file; PATH is untouched. Idempotent.
  void Abort();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }
  // SHA-256 of everything appended; valid after a successful Commit().
  const std::string& sha256_hex() const { return sha256_hex_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd);
  absl::Status Fail(absl::Status status);

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  absl::Status error_;
  uint64_t bytes_written_ = 0;
  Sha256 hash_;
  std::string sha256_hex_;
};

// Writes `contents` to `path` atomically (as above).
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace ampd::engine::io

#endif  // AMPD_ENGINE_IO_ATOMIC_FILE_H_
