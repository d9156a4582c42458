#ifndef AMPD_ENGINE_IO_TENSORBOARD_H_
#define AMPD_ENGINE_IO_TENSORBOARD_H_

// TensorBoard event files: scalars (loss, accuracy, lr, loss scale, ...) as
// TensorBoard reads them (`tensorboard --logdir DIR`, EventAccumulator).
//
// A file is a sequence of TFRecords, each
//   uint64 length (little-endian)
//   uint32 masked CRC-32C of those 8 length bytes
//   `length` bytes: a serialized tensorboard.Event (tensorboard_event.proto)
//   uint32 masked CRC-32C of the data
// and the first Event carries file_version "brain.Event:2".

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ampd::engine::io {

// One TFRecord around `data`.
std::string FrameTfRecord(const std::string& data);

// Seconds since the epoch, with microseconds: the Event wall_time clock.
double WallTimeSeconds();

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) if missing and a new file
  // DIR/events.out.tfevents.<seconds>.<hostname> in it (".<pid>.<n>" is
  // appended should that name exist), then writes and flushes the
  // file_version record.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& dir);
  ~EventFileWriter();  // Close()s, ignoring errors

  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends a scalar (stored as a float, as TensorBoard does). Records are
  // buffered; Flush() hands them to the OS. Thread-safe. After a write error,
  // every later call returns that error.
  absl::Status AddScalar(const std::string& tag, int64_t step, double value, double wall_time);
  absl::Status AddScalar(const std::string& tag, int64_t step, double value) {
    return AddScalar(tag, step, value, WallTimeSeconds());
  }
  // Writes the buffered records to the file (readers see them afterwards).
  absl::Status Flush();
  // Flush, fsync and close. Later calls fail.
  absl::Status Close();

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::Status AppendEventLocked(const std::string& serialized_event);
  absl::Status FlushLocked();

  std::mutex mu_;
  const std::string path_;
  int fd_ = -1;
  std::string pending_;
  absl::Status error_;
};

}  // namespace ampd::engine::io

#endif  // AMPD_ENGINE_IO_TENSORBOARD_H_
