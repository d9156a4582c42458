#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ampd::engine::io {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A suffix unlikely to collide across threads and processes; O_EXCL makes a
// collision harmless (the caller retries with the next one).
std::string TempSuffix() {
  static std::atomic<uint64_t> counter{0};
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (static_cast<uint64_t>(::getpid()) << 32) ^ static_cast<uint64_t>(ts.tv_nsec) ^
               (static_cast<uint64_t>(ts.tv_sec) << 20) ^
               (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  // splitmix64 finaliser, so consecutive counters give unrelated suffixes.
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
  return std::string(buf, 8);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    const std::string& path) {
  if (path.empty() || path.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("not a file path: \"", path, "\""));
  }
  int last_errno = 0;
  std::string temp_path;
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path = absl::StrCat(path, ".tmp-", TempSuffix());
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0)
      return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, temp_path, fd));
    last_errno = errno;
    if (last_errno != EEXIST && last_errno != EINTR) break;
  }
  return ErrnoStatus(last_errno, "cannot create temporary file", temp_path);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) Abort();
}

absl::Status AtomicFileWriter::Fail(absl::Status status) {
  error_ = status;
  Abort();
  return status;
}

absl::Status AtomicFileWriter::Append(const void* data, size_t size) {
  if (!error_.ok()) return error_;
  if (committed_ || fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat("write to ", path_, " after Commit/Abort"));
  }
  hash_.Update(data, size);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    // Linux writes at most 0x7ffff000 bytes per call.
    const size_t chunk = std::min<size_t>(size, size_t{1} << 30);
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail(ErrnoStatus(errno, "cannot write", temp_path_));
    }
    if (n == 0) return Fail(ErrnoStatus(EIO, "cannot write", temp_path_));
    p += n;
    size -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (!error_.ok()) return error_;
  if (committed_ || fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat("Commit of ", path_, " after Commit/Abort"));
  }
  if (::fsync(fd_) != 0) return Fail(ErrnoStatus(errno, "cannot fsync", temp_path_));
  // close() reports deferred write errors on some file systems (NFS).
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Fail(ErrnoStatus(errno, "cannot close", temp_path_));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return Fail(ErrnoStatus(errno, absl::StrCat("cannot rename ", temp_path_, " to"), path_));
  }
  committed_ = true;
  sha256_hex_ = hash_.FinishHex();
  const std::string dir = DirectoryOf(path_);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoStatus(errno, "cannot open directory", dir);
  // Some file systems cannot fsync a directory (EINVAL); the rename is then as
  // durable as they make it.
  if (::fsync(dir_fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(dir_fd);
    return ErrnoStatus(err, "cannot fsync directory", dir);
  }
  ::close(dir_fd);
  return absl::OkStatus();
}

void AtomicFileWriter::Abort() {
  if (committed_) return;
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    temp_path_.clear();
  }
  if (error_.ok()) error_ = absl::CancelledError(absl::StrCat("write to ", path_, " aborted"));
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  absl::Status status = (*writer)->Append(contents.data(), contents.size());
  if (!status.ok()) return status;
  return (*writer)->Commit();
}

}  // namespace ampd::engine::io
