#include "server/jobs/wire_log.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::server::jobs {
namespace {

std::string Bytes(const grpc::Slice& s) {
  return std::string(reinterpret_cast<const char*>(s.begin()), s.size());
}

TEST(WireLogTest, EveryIndexAcrossChunkBoundariesReadsBackItsEvent) {
  WireLog log;
  // Chunks of 64, 128, 256, 512, ... slots: run into the fifth one.
  const size_t n = WireLog::kFirstChunk * (1 + 2 + 4 + 8) + 5;
  for (size_t i = 0; i < n; ++i) log.Append(grpc::Slice("e" + std::to_string(i)));
  ASSERT_EQ(log.size(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bytes(log.At(i)), "e" + std::to_string(i)) << i;
}

TEST(WireLogTest, ReadsAtMostMaxAndSaysEndedOnlyAtTheEndOfAnEndedJob) {
  WireLog log;
  for (int i = 0; i < 5; ++i) log.Append(grpc::Slice(std::to_string(i)));
  log.SetState(/*training=*/true, /*ended=*/false);
  std::vector<grpc::Slice> out;
  WireLog::Read r = log.ReadFrom(1, 3, &out);
  EXPECT_EQ(r.count, 3u);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(Bytes(out[0]), "1");
  EXPECT_EQ(Bytes(out[2]), "3");
  EXPECT_TRUE(r.training);
  EXPECT_FALSE(r.ended);
  out.clear();
  r = log.ReadFrom(5, 10, &out);  // caught up, job still running
  EXPECT_EQ(r.count, 0u);
  EXPECT_FALSE(r.ended);

  log.SetState(false, true);
  out.clear();
  r = log.ReadFrom(3, 1, &out);  // ended, but one event is left after this read
  EXPECT_EQ(r.count, 1u);
  EXPECT_FALSE(r.ended);
  EXPECT_FALSE(r.training);
  out.clear();
  r = log.ReadFrom(4, 1, &out);
  EXPECT_EQ(r.count, 1u);
  EXPECT_TRUE(r.ended);
}

TEST(WireLogTest, ADeletedJobReadsNothing) {
  WireLog log;
  log.Append(grpc::Slice("a"));
  log.SetState(false, true);
  log.MarkDeleted();
  log.SetState(false, true);  // a later state change keeps the deletion
  std::vector<grpc::Slice> out;
  const WireLog::Read r = log.ReadFrom(0, 10, &out);
  EXPECT_TRUE(r.deleted);
  EXPECT_EQ(r.count, 0u);
  EXPECT_TRUE(out.empty());
}

// One writer, several readers with no lock: each reader sees every event once,
// in order, and sees the end only after the last one.
TEST(WireLogTest, ReadersFollowAWriterWithNoGapNoRepeat) {
  WireLog log;
  const size_t n = 20000;
  constexpr int kReaders = 4;
  std::vector<std::vector<std::string>> seen(kReaders);
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&log, &seen, r] {
      size_t cursor = 0;
      while (true) {
        std::vector<grpc::Slice> out;
        const WireLog::Read read = log.ReadFrom(cursor, 1 + r * 7, &out);
        for (const grpc::Slice& s : out) seen[r].push_back(Bytes(s));
        cursor += read.count;
        if (read.ended) return;
        if (read.count == 0) std::this_thread::yield();
      }
    });
  }
  log.SetState(true, false);
  for (size_t i = 0; i < n; ++i) {
    log.Append(grpc::Slice(std::to_string(i)));
    if (i + 1 == n) log.SetState(false, true);
  }
  for (auto& t : readers) t.join();
  for (int r = 0; r < kReaders; ++r) {
    ASSERT_EQ(seen[r].size(), n) << "reader " << r;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[r][i], std::to_string(i)) << r << " " << i;
  }
}

}  // namespace
}  // namespace ampd::server::jobs
