#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "engine/io/sha256.h"
#include "gtest/gtest.h"
#include "tests/engine/io/io_test_util.h"

namespace ampd::engine::io {
namespace {

using testing::ListDir;
using testing::MakeTempDir;
using testing::ReadBytes;

TEST(AtomicFileTest, CommitReplacesTheFileAndLeavesNoTemporary) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/state.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old contents").ok());
  EXPECT_EQ(ReadBytes(path), "old contents");

  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string temp = (*writer)->temp_path();
  EXPECT_EQ(temp.rfind(path + ".tmp-", 0), 0u) << temp;
  ASSERT_TRUE((*writer)->Append("new ", 4).ok());
  ASSERT_TRUE((*writer)->Append("contents", 8).ok());
  // Until Commit, readers see the old file.
  EXPECT_EQ(ReadBytes(path), "old contents");
  EXPECT_EQ(ReadBytes(temp), "new contents");
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(ReadBytes(path), "new contents");
  EXPECT_EQ((*writer)->bytes_written(), 12u);
  EXPECT_EQ((*writer)->sha256_hex(), Sha256HexOfBytes("new contents"));
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"state.bin"});
  // The umask applies (mkstemp's 0600 would hide checkpoints from other users).
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
  // Writes after Commit fail.
  EXPECT_FALSE((*writer)->Append("x", 1).ok());
}

TEST(AtomicFileTest, AbortAndDestructionLeaveTheOldFile) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/state.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("partial", 7).ok());
    (*writer)->Abort();
    EXPECT_FALSE((*writer)->Commit().ok());
  }
  {
    absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("partial", 7).ok());
    // Destroyed without Commit: as if the process had failed mid-write.
  }
  EXPECT_EQ(ReadBytes(path), "old");
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"state.bin"});
}

TEST(AtomicFileTest, ErrorsNameThePathAndErrno) {
  const std::string dir = MakeTempDir();
  // A directory that does not exist.
  absl::Status status = WriteFileAtomically(dir + "/missing/state.bin", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find(dir + "/missing/state.bin.tmp-"), std::string::npos) << status;
  EXPECT_NE(status.message().find("No such file or directory"), std::string::npos) << status;
  // A parent that is a regular file.
  ASSERT_TRUE(WriteFileAtomically(dir + "/file", "x").ok());
  status = WriteFileAtomically(dir + "/file/state.bin", "x");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("Not a directory"), std::string::npos) << status;
  // The target is a directory: rename fails, the temporary file is removed.
  ASSERT_EQ(::mkdir((dir + "/adir").c_str(), 0755), 0);
  ::close(::open((dir + "/adir/inside").c_str(), O_CREAT | O_WRONLY, 0644));
  status = WriteFileAtomically(dir + "/adir", "x");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("cannot rename"), std::string::npos) << status;
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"adir", "file"}));
  EXPECT_FALSE(WriteFileAtomically("", "x").ok());
  EXPECT_FALSE(WriteFileAtomically(dir + "/", "x").ok());
}

}  // namespace
}  // namespace ampd::engine::io
