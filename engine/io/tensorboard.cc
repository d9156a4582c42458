#include "engine/io/tensorboard.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/io/crc32c.h"
#include "engine/io/errno_status.h"
#include "tensorboard_event.pb.h"

namespace ampd::engine::io {
namespace {

// Records are written once this much is buffered, even without Flush().
constexpr size_t kMaxPending = 1 << 16;

void AppendLe(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string name(buf);
  // The name becomes part of a file name.
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

}  // namespace

std::string FrameTfRecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLe(data.size(), 8, &out);
  AppendLe(MaskCrc32c(Crc32c(out.data(), 8)), 4, &out);
  out += data;
  AppendLe(MaskCrc32c(Crc32c(data.data(), data.size())), 4, &out);
  return out;
}

double WallTimeSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec / 1000) * 1e-6;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("event file directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot create directory", dir);

  const double now = WallTimeSeconds();
  const std::string base = absl::StrCat(dir, dir.back() == '/' ? "" : "/", "events.out.tfevents.",
                                        static_cast<int64_t>(now), ".", HostName());
  std::string path = base;
  int fd = -1;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    if (attempt > 0) path = absl::StrCat(base, ".", ::getpid(), ".", attempt);
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
    if (fd >= 0 || (errno != EEXIST && errno != EINTR)) break;
  }
  if (fd < 0) return ErrnoStatus(errno, "cannot create event file", path);

  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, fd));
  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(writer->mu_);
    status = writer->AppendEventLocked(event.SerializeAsString());
    if (status.ok()) status = writer->FlushLocked();
  }
  if (!status.ok()) return status;
  return writer;
}

EventFileWriter::~EventFileWriter() { Close().IgnoreError(); }

absl::Status EventFileWriter::AppendEventLocked(const std::string& serialized_event) {
  if (!error_.ok()) return error_;
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": event file is closed"));
  pending_ += FrameTfRecord(serialized_event);
  if (pending_.size() >= kMaxPending) return FlushLocked();
  return absl::OkStatus();
}

absl::Status EventFileWriter::FlushLocked() {
  if (!error_.ok()) return error_;
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": event file is closed"));
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = ErrnoStatus(errno, "cannot write", path_);
      return error_;
    }
    done += static_cast<size_t>(n);
  }
  pending_.clear();
  return absl::OkStatus();
}

absl::Status EventFileWriter::AddScalar(const std::string& tag, int64_t step, double value,
                                        double wall_time) {
  if (tag.empty()) return absl::InvalidArgumentError("scalar tag is empty");
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  const std::string serialized = event.SerializeAsString();
  std::lock_guard<std::mutex> lock(mu_);
  return AppendEventLocked(serialized);
}

absl::Status EventFileWriter::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  return FlushLocked();
}

absl::Status EventFileWriter::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return error_.ok() ? absl::OkStatus() : error_;
  absl::Status status = FlushLocked();
  if (status.ok() && ::fsync(fd_) != 0) status = ErrnoStatus(errno, "cannot fsync", path_);
  if (::close(fd_) != 0 && status.ok()) status = ErrnoStatus(errno, "cannot close", path_);
  fd_ = -1;
  pending_.clear();
  if (!status.ok() && error_.ok()) error_ = status;
  return status;
}

}  // namespace ampd::engine::io
