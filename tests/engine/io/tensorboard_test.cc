#include "engine/io/tensorboard.h"

#include <unistd.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/io/crc32c.h"
#include "gtest/gtest.h"
#include "tensorboard_event.pb.h"
#include "tests/engine/io/io_test_util.h"

namespace ampd::engine::io {
namespace {

using testing::ListDir;
using testing::MakeTempDir;
using testing::ReadBytes;

uint64_t LoadLe(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[pos + i]);
  return v;
}

// A TFRecord reader that checks both CRCs of every record and that the file
// ends on a record boundary.
absl::StatusOr<std::vector<tensorboard::Event>> ReadEvents(const std::string& bytes) {
  std::vector<tensorboard::Event> events;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 12)
      return absl::DataLossError(absl::StrCat("truncated length at ", pos));
    const uint64_t length = LoadLe(bytes, pos, 8);
    const uint32_t length_crc = static_cast<uint32_t>(LoadLe(bytes, pos + 8, 4));
    if (length_crc != MaskCrc32c(Crc32c(bytes.data() + pos, 8))) {
      return absl::DataLossError(absl::StrCat("length CRC mismatch at ", pos));
    }
    if (bytes.size() - pos - 12 < length + 4)
      return absl::DataLossError(absl::StrCat("truncated record at ", pos));
    const std::string data = bytes.substr(pos + 12, length);
    const uint32_t data_crc = static_cast<uint32_t>(LoadLe(bytes, pos + 12 + length, 4));
    if (data_crc != MaskCrc32c(Crc32c(data.data(), data.size()))) {
      return absl::DataLossError(absl::StrCat("data CRC mismatch at ", pos));
    }
    tensorboard::Event event;
    if (!event.ParseFromString(data))
      return absl::DataLossError(absl::StrCat("bad Event at ", pos));
    events.push_back(std::move(event));
    pos += 12 + length + 4;
  }
  return events;
}

std::string HostName() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

TEST(TensorBoardTest, FrameLayout) {
  const std::string framed = FrameTfRecord("hello");
  ASSERT_EQ(framed.size(), 8u + 4 + 5 + 4);
  EXPECT_EQ(LoadLe(framed, 0, 8), 5u);
  EXPECT_EQ(LoadLe(framed, 8, 4), MaskCrc32c(Crc32c("\x05\0\0\0\0\0\0\0", 8)));
  EXPECT_EQ(framed.substr(12, 5), "hello");
  EXPECT_EQ(LoadLe(framed, 17, 4), MaskCrc32c(Crc32c("hello", 5)));
  EXPECT_EQ(FrameTfRecord("").size(), 16u);
}

TEST(TensorBoardTest, WritesScalarsTensorBoardCanRead) {
  const std::string root = MakeTempDir();
  const std::string dir = root + "/tensorboard/job-1";  // created, parents included
  const double before = WallTimeSeconds();
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Open(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  const std::vector<std::string> files = ListDir(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(dir + "/" + files[0], path);
  // events.out.tfevents.<10-digit seconds>.<hostname>
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(files[0].rfind(prefix, 0), 0u) << files[0];
  const std::string seconds = files[0].substr(prefix.size(), 10);
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << files[0];
  EXPECT_GE(std::stoll(seconds), static_cast<int64_t>(before));
  EXPECT_EQ(files[0].substr(prefix.size() + 10), "." + HostName());

  // The file_version record is on disk as soon as Open returns.
  absl::StatusOr<std::vector<tensorboard::Event>> events = ReadEvents(ReadBytes(path));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  EXPECT_EQ((*events)[0].step(), 0);
  EXPECT_GE((*events)[0].wall_time(), std::floor(before));
  EXPECT_LE((*events)[0].wall_time(), WallTimeSeconds() + 1);

  struct Scalar {
    std::string tag;
    int64_t step;
    double value;
  };
  const std::vector<Scalar> scalars = {
      {"train/loss", 1, 2.302585},
      {"train/lr", 1, 1e-3},
      {"train/loss_scale", 1, 65536},
      {"train/skipped_steps", 1, 0},
      {"train/grad_norm", 1, 0.75},
      {"train/samples_per_sec", 1, 12345.5},
      {"train/loss", 2, -0.5},
      {"eval/accuracy", 2, 0.8731},
      {"train/loss", 3000000000LL, 1e-30},
  };
  for (const Scalar& s : scalars) {
    ASSERT_TRUE((*writer)->AddScalar(s.tag, s.step, s.value, 1700000000.25 + s.step).ok());
  }
  // Buffered until Flush.
  EXPECT_EQ(ReadEvents(ReadBytes(path))->size(), 1u);
  ASSERT_TRUE((*writer)->Flush().ok());
  events = ReadEvents(ReadBytes(path));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1 + scalars.size());
  for (size_t i = 0; i < scalars.size(); ++i) {
    const tensorboard::Event& e = (*events)[i + 1];
    SCOPED_TRACE(scalars[i].tag);
    EXPECT_EQ(e.what_case(), tensorboard::Event::kSummary);
    EXPECT_EQ(e.step(), scalars[i].step);
    EXPECT_EQ(e.wall_time(), 1700000000.25 + scalars[i].step);
    ASSERT_EQ(e.summary().value_size(), 1);
    const tensorboard::Summary::Value& v = e.summary().value(0);
    EXPECT_EQ(v.tag(), scalars[i].tag);
    // Present even when 0.0: TensorBoard skips values without simple_value.
    EXPECT_EQ(v.value_case(), tensorboard::Summary::Value::kSimpleValue);
    EXPECT_EQ(v.simple_value(), static_cast<float>(scalars[i].value));
  }
  ASSERT_TRUE((*writer)->AddScalar("nan", 4, std::nan("")).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  events = ReadEvents(ReadBytes(path));
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(std::isnan(events->back().summary().value(0).simple_value()));
  // Closed: later writes fail, a second Close is harmless.
  EXPECT_FALSE((*writer)->AddScalar("x", 5, 1).ok());
  EXPECT_FALSE((*writer)->Flush().ok());
  EXPECT_TRUE((*writer)->Close().ok());
  EXPECT_FALSE((*writer)->AddScalar("", 5, 1).ok());
}

TEST(TensorBoardTest, CorruptionIsDetectedByTheFraming) {
  const std::string dir = MakeTempDir();
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Open(dir);
    ASSERT_TRUE(writer.ok());
    path = (*writer)->path();
    ASSERT_TRUE((*writer)->AddScalar("loss", 1, 0.5, 1.0).ok());
  }  // the destructor flushes and closes
  const std::string bytes = ReadBytes(path);
  ASSERT_TRUE(ReadEvents(bytes).ok());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string mutated = bytes;
    mutated[i] = static_cast<char>(mutated[i] ^ 0x10);
    EXPECT_FALSE(ReadEvents(mutated).ok()) << "flip at " << i;
  }
}

TEST(TensorBoardTest, ManyScalarsAndThreads) {
  const std::string dir = MakeTempDir();
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Open(dir);
  ASSERT_TRUE(writer.ok());
  EventFileWriter* w = writer->get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([w, t] {
      for (int i = 0; i < 2000; ++i) {
        EXPECT_TRUE(w->AddScalar(absl::StrCat("thread", t), i, i * 0.5, 1.0 + i).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(w->Close().ok());
  absl::StatusOr<std::vector<tensorboard::Event>> events = ReadEvents(ReadBytes(w->path()));
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u + 4 * 2000);
  std::vector<int> next(4, 0);
  for (size_t i = 1; i < events->size(); ++i) {
    const tensorboard::Event& e = (*events)[i];
    const int t = e.summary().value(0).tag().back() - '0';
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 4);
    EXPECT_EQ(e.step(), next[t]++);  // each thread's records stay in order
    EXPECT_EQ(e.summary().value(0).simple_value(), e.step() * 0.5f);
  }
}

TEST(TensorBoardTest, WritersInOneDirectoryGetTheirOwnFiles) {
  const std::string dir = MakeTempDir();
  absl::StatusOr<std::unique_ptr<EventFileWriter>> a = EventFileWriter::Open(dir);
  absl::StatusOr<std::unique_ptr<EventFileWriter>> b = EventFileWriter::Open(dir);
  absl::StatusOr<std::unique_ptr<EventFileWriter>> c = EventFileWriter::Open(dir + "/");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_NE((*b)->path(), (*c)->path());
  EXPECT_EQ(ListDir(dir).size(), 3u);
  for (const std::string& name : ListDir(dir))
    EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
}

TEST(TensorBoardTest, OpenFailsCleanly) {
  const std::string dir = MakeTempDir();
  testing::WriteBytes(dir + "/file", "x");
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Open(dir + "/file/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(dir + "/file/tb"), std::string::npos) << writer.status();
  EXPECT_FALSE(EventFileWriter::Open("").ok());
}

}  // namespace
}  // namespace ampd::engine::io
