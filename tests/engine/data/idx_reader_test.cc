#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/data/dataset.h"
#include "gtest/gtest.h"

namespace ampd::engine {
namespace {

// A fresh path under TEST_TMPDIR, unique to the running test.
std::string TempPath(const std::string& name) {
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir =
      absl::StrCat(testing::TempDir(), test->test_suite_name(), ".", test->name());
  std::filesystem::create_directories(dir);
  return absl::StrCat(dir, "/", name);
}

std::string Idx(uint8_t type, std::initializer_list<uint32_t> dims, const std::string& payload) {
  std::string bytes = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(d >> shift));
  }
  return bytes + payload;
}

std::string Gzip(const std::string& bytes) {
  std::vector<Bytef> out(compressBound(bytes.size()) + 64);
  z_stream stream{};
  // 15 + 16: zlib's way of asking for a gzip wrapper.
  EXPECT_EQ(deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  const size_t size = stream.total_out;
  deflateEnd(&stream);
  return std::string(reinterpret_cast<const char*>(out.data()), size);
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return path;
  EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), file), bytes.size());
  std::fclose(file);
  return path;
}

// Image bytes with a pattern that tells examples and pixels apart.
std::string Pixels(int64_t n) {
  std::string pixels;
  for (int64_t i = 0; i < n; ++i) pixels.push_back(static_cast<char>((i * 37 + 11) % 256));
  return pixels;
}

std::string Labels(std::initializer_list<int> labels) {
  std::string bytes;
  for (int label : labels) bytes.push_back(static_cast<char>(label));
  return bytes;
}

testing::AssertionResult IsError(const absl::Status& status, absl::StatusCode code,
                                 std::initializer_list<std::string> parts) {
  if (status.code() != code) {
    return testing::AssertionFailure()
           << "code " << absl::StatusCodeToString(status.code()) << ", want "
           << absl::StatusCodeToString(code) << ": " << status;
  }
  for (const std::string& part : parts) {
    if (!absl::StrContains(status.message(), part)) {
      return testing::AssertionFailure() << "'" << status.message() << "' lacks '" << part << "'";
    }
  }
  return testing::AssertionSuccess() << status.message();
}

testing::AssertionResult IsInvalid(const absl::Status& status,
                                   std::initializer_list<std::string> parts) {
  return IsError(status, absl::StatusCode::kInvalidArgument, parts);
}

// A valid pair: three 2x2 images.
struct SmallPair {
  std::string images = Idx(0x08, {3, 2, 2}, Pixels(12));
  std::string labels = Idx(0x08, {3}, Labels({0, 9, 4}));
};

void ExpectSmallPair(const absl::StatusOr<data::Dataset>& data) {
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 3);
  EXPECT_EQ(data->feature_dim, 4);
  EXPECT_EQ(data->num_classes, 10);
  EXPECT_EQ(data->labels, (std::vector<int32_t>{0, 9, 4}));
  const std::string pixels = Pixels(12);
  ASSERT_EQ(data->features.size(), 12u);
  for (size_t i = 0; i < pixels.size(); ++i) {
    EXPECT_EQ(data->features[i], static_cast<uint8_t>(pixels[i]) / 255.0f) << i;
  }
}

TEST(IdxReaderTest, ReadsRawFiles) {
  SmallPair pair;
  ExpectSmallPair(data::ReadIdxDataset(Write("images", pair.images), Write("labels", pair.labels)));
}

TEST(IdxReaderTest, ReadsGzipFiles) {
  SmallPair pair;
  ExpectSmallPair(data::ReadIdxDataset(Write("images.gz", Gzip(pair.images)),
                                       Write("labels.gz", Gzip(pair.labels))));
}

TEST(IdxReaderTest, DetectsGzipByMagicNotByName) {
  SmallPair pair;
  ExpectSmallPair(data::ReadIdxDataset(Write("images.idx", Gzip(pair.images)),
                                       Write("labels.gz", pair.labels)));
}

TEST(IdxReaderTest, ScalesBytesToUnitInterval) {
  const std::string images = Idx(0x08, {1, 3}, std::string("\x00\x33\xff", 3));
  const absl::StatusOr<data::Dataset> data =
      data::ReadIdxDataset(Write("images", images), Write("labels", Idx(0x08, {1}, Labels({1}))));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->features, (std::vector<float>{0.0f, 0.2f, 1.0f}));
}

TEST(IdxReaderTest, FeatureDimIsProductOfTrailingDims) {
  const absl::StatusOr<data::Dataset> data =
      data::ReadIdxDataset(Write("images", Idx(0x08, {2, 3, 4, 5}, Pixels(120))),
                           Write("labels", Idx(0x08, {2}, Labels({1, 2}))));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 2);
  EXPECT_EQ(data->feature_dim, 60);
}

TEST(IdxReaderTest, HonoursNumClasses) {
  const std::string images = Write("images", Idx(0x08, {2, 1}, Pixels(2)));
  const std::string labels = Write("labels", Idx(0x08, {2}, Labels({15, 3})));
  const absl::StatusOr<data::Dataset> data = data::ReadIdxDataset(images, labels, 16);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_classes, 16);
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(images, labels).status(),
                        {labels, "label 15 out of range at byte offset 8"}));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(images, labels, 0).status(), {"num_classes"}));
}

TEST(IdxReaderTest, BadMagic) {
  SmallPair pair;
  std::string images = pair.images;
  images[1] = 0x03;
  const std::string labels = Write("labels", pair.labels);
  for (const std::string& path : {Write("images", images), Write("images.gz", Gzip(images))}) {
    EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(path, labels).status(),
                          {path, "bad magic at byte offset 0", "00 03 08 03"}));
  }
  // A text file is not an IDX file either.
  const std::string text = Write("text", "hello, world\n");
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(text, labels).status(), {text, "bad magic"}));
}

TEST(IdxReaderTest, UnsupportedElementType) {
  const std::string images = Write("images", Idx(0x0d, {3, 2, 2}, std::string(48, '\0')));
  const std::string labels = Write("labels", SmallPair().labels);
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(images, labels).status(),
                        {images, "unsupported element type 0x0d at byte offset 2"}));
}

TEST(IdxReaderTest, WrongRank) {
  SmallPair pair;
  const std::string images = Write("images", pair.images);
  const std::string labels = Write("labels", pair.labels);
  const std::string flat_images = Write("flat", Idx(0x08, {3}, Pixels(3)));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(flat_images, labels).status(),
                        {flat_images, "unsupported rank 1 at byte offset 3"}));
  const std::string matrix_labels = Write("matrix", Idx(0x08, {3, 1}, Labels({0, 1, 2})));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(images, matrix_labels).status(),
                        {matrix_labels, "unsupported rank 2 at byte offset 3"}));
  // Swapped arguments are caught by rank, before any data is read.
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(labels, images).status(), {labels, "byte offset 3"}));
}

TEST(IdxReaderTest, TruncatedHeader) {
  const std::string labels = Write("labels", SmallPair().labels);
  const std::string empty = Write("empty", "");
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(empty, labels).status(),
                        {empty, "truncated at byte offset 0: expected 4 bytes of header"}));
  const std::string short_magic = Write("short_magic", std::string("\0\0\x08", 3));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(short_magic, labels).status(),
                        {short_magic, "truncated at byte offset 3"}));
  // Rank 3 promises 12 bytes of dimensions; 6 arrive.
  const std::string short_dims = Write("short_dims", Idx(0x08, {3, 2, 2}, "").substr(0, 10));
  EXPECT_TRUE(
      IsInvalid(data::ReadIdxDataset(short_dims, labels).status(),
                {short_dims, "truncated at byte offset 10: expected 12 bytes of header (3 dim"}));
  const std::string gz = Write("short_dims.gz", Gzip(Idx(0x08, {3, 2, 2}, "").substr(0, 10)));
  EXPECT_TRUE(
      IsInvalid(data::ReadIdxDataset(gz, labels).status(), {gz, "truncated at byte offset 10"}));
}

TEST(IdxReaderTest, TruncatedData) {
  // 3 images of 28x28 = 2352 bytes promised, 2000 present.
  const std::string images = Idx(0x08, {3, 28, 28}, Pixels(2000));
  const std::string labels = Write("labels", SmallPair().labels);
  for (const std::string& path : {Write("images", images), Write("images.gz", Gzip(images))}) {
    EXPECT_TRUE(
        IsInvalid(data::ReadIdxDataset(path, labels).status(),
                  {path, "truncated at byte offset 2016: expected 2352 bytes of image data"}));
  }
  const std::string short_labels = Write("short_labels", Idx(0x08, {3}, Labels({1, 2})));
  const std::string full_images = Write("full_images", Idx(0x08, {3, 28, 28}, Pixels(2352)));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(full_images, short_labels).status(),
                        {short_labels, "truncated at byte offset 10: expected 3 bytes of label"}));
}

TEST(IdxReaderTest, TruncatedGzipStream) {
  const std::string images = Idx(0x08, {50, 28, 28}, Pixels(50 * 784));
  const std::string labels = Write("labels", Idx(0x08, {50}, std::string(50, '\x01')));
  const std::string packed = Gzip(images);
  // Cut in the middle of the compressed data.
  const std::string half = Write("half.gz", packed.substr(0, packed.size() / 2));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(half, labels).status(),
                        {half, "truncated at byte offset", "gzip stream ends early"}));
  // All data present, only the CRC/size trailer lost.
  const std::string no_trailer = Write("no_trailer.gz", packed.substr(0, packed.size() - 8));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(no_trailer, labels).status(),
                        {no_trailer, "truncated gzip stream at byte offset 39216", "trailer"}));
}

TEST(IdxReaderTest, CorruptGzipData) {
  const std::string images = Idx(0x08, {50, 28, 28}, Pixels(50 * 784));
  const std::string labels = Write("labels", Idx(0x08, {50}, std::string(50, '\x01')));
  std::string packed = Gzip(images);
  // Garbage over the middle of the deflate stream, or over the CRC, is caught
  // by inflate or by the CRC check; either way no dataset comes back.
  std::string bad_stream = packed;
  for (size_t i = bad_stream.size() / 2; i < bad_stream.size() / 2 + 16; ++i) bad_stream[i] ^= 0x5a;
  std::string bad_crc = packed;
  bad_crc[bad_crc.size() - 8] ^= 0x01;
  for (const std::string& path :
       {Write("bad_stream.gz", bad_stream), Write("bad_crc.gz", bad_crc)}) {
    EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(path, labels).status(),
                          {path, "corrupt gzip data at byte offset", "of the compressed file"}));
  }
}

TEST(IdxReaderTest, LabelOutOfRange) {
  const std::string images = Write("images", Idx(0x08, {5, 1}, Pixels(5)));
  const std::string labels = Write("labels", Idx(0x08, {5}, Labels({1, 2, 3, 10, 4})));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(images, labels).status(),
                        {labels, "label 10 out of range at byte offset 11: num_classes is 10"}));
  const std::string gz = Write("labels.gz", Gzip(Idx(0x08, {5}, Labels({1, 2, 3, 4, 255}))));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(images, gz).status(),
                        {gz, "label 255 out of range at byte offset 12"}));
}

TEST(IdxReaderTest, CountMismatch) {
  const std::string images = Write("images", SmallPair().images);
  const std::string labels = Write("labels", Idx(0x08, {4}, Labels({0, 1, 2, 3})));
  EXPECT_TRUE(
      IsInvalid(data::ReadIdxDataset(images, labels).status(),
                {labels, "count mismatch at byte offset 4", "4 labels", images, "3 images"}));
}

TEST(IdxReaderTest, TrailingData) {
  SmallPair pair;
  const std::string images = Write("images", pair.images + "xyz");
  const std::string labels = Write("labels", pair.labels);
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(images, labels).status(),
                        {images, "unexpected data at byte offset 28"}));
}

TEST(IdxReaderTest, MissingFile) {
  const std::string labels = Write("labels", SmallPair().labels);
  const std::string images = Write("images", SmallPair().images);
  const std::string missing = TempPath("no-such-file.gz");
  EXPECT_TRUE(IsError(data::ReadIdxDataset(missing, labels).status(), absl::StatusCode::kNotFound,
                      {missing}));
  EXPECT_TRUE(IsError(data::ReadIdxDataset(images, missing).status(), absl::StatusCode::kNotFound,
                      {missing}));
}

TEST(IdxReaderTest, DirectoryIsAnError) {
  const std::string labels = Write("labels", SmallPair().labels);
  const std::string dir = TempPath("a_directory");
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(dir, labels).status(), {dir}));
}

TEST(IdxReaderTest, HugeDimensionsFailWithoutAllocating) {
  const std::string labels = Write("labels", SmallPair().labels);
  // 2^32 - 1 cubed would overflow int64.
  const std::string absurd = Write("absurd", Idx(0x08, {0xffffffff, 0xffffffff, 0xffffffff}, ""));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(absurd, labels).status(),
                        {absurd, "dimension 1 (4294967295) too large at byte offset 8"}));
  // Within the limit, but the data is not there: nothing is sized from the
  // claimed counts before the bytes arrive.
  const std::string many_images = Write("many_images", Idx(0x08, {0xffffffff, 1}, Pixels(10)));
  const std::string many_labels = Write("many_labels", Idx(0x08, {0xffffffff}, Labels({1, 2})));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(many_images, many_labels).status(),
                        {many_labels, "truncated at byte offset 10: expected 4294967295 bytes"}));
  // Plausible, in range, but the data is not there: a truncation error, found
  // without first allocating 7.8e8 values.
  const std::string labels_big =
      Write("labels_big", Idx(0x08, {1000000}, std::string(1000000, '\x01')));
  const std::string hollow = Write("hollow", Idx(0x08, {1000000, 28, 28}, Pixels(100)));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(hollow, labels_big).status(),
                        {hollow, "truncated at byte offset 116: expected 784000000 bytes"}));
}

TEST(IdxReaderTest, ZeroDimension) {
  const std::string labels = Write("labels", SmallPair().labels);
  const std::string no_examples = Write("no_examples", Idx(0x08, {0, 2, 2}, ""));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(no_examples, labels).status(),
                        {no_examples, "dimension 0 is 0 at byte offset 4"}));
  const std::string flat = Write("flat", Idx(0x08, {3, 0, 2}, ""));
  EXPECT_TRUE(IsInvalid(data::ReadIdxDataset(flat, labels).status(),
                        {flat, "dimension 1 is 0 at byte offset 8"}));
}

TEST(IdxReaderTest, LoadMnistStyleUsesStandardNames) {
  const std::string dir = TempPath("mnist");
  std::filesystem::create_directories(dir);
  SmallPair pair;
  Write("mnist/train-images-idx3-ubyte.gz", Gzip(pair.images));
  Write("mnist/train-labels-idx1-ubyte.gz", Gzip(pair.labels));
  // The test split unpacked: used when no .gz is there.
  Write("mnist/t10k-images-idx3-ubyte", Idx(0x08, {1, 2, 2}, Pixels(4)));
  Write("mnist/t10k-labels-idx1-ubyte", Idx(0x08, {1}, Labels({7})));
  ExpectSmallPair(data::LoadMnistStyle(dir, /*train=*/true));
  const absl::StatusOr<data::Dataset> test = data::LoadMnistStyle(dir + "/", /*train=*/false);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->labels, std::vector<int32_t>{7});

  const std::string missing = TempPath("no-such-dir");
  EXPECT_TRUE(IsError(data::LoadMnistStyle(missing, true).status(), absl::StatusCode::kNotFound,
                      {missing + "/train-images-idx3-ubyte.gz"}));
}

TEST(IdxReaderTest, RealFashionMnistTestSplit) {
  if (!std::filesystem::exists(data::kFashionMnistDir)) {
    GTEST_SKIP() << data::kFashionMnistDir << " is missing (Debian package dataset-fashion-mnist)";
  }
  const absl::StatusOr<data::Dataset> data =
      data::LoadMnistStyle(data::kFashionMnistDir, /*train=*/false);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 10000);
  EXPECT_EQ(data->feature_dim, 784);
  EXPECT_EQ(data->num_classes, 10);
  ASSERT_EQ(data->features.size(), 10000u * 784u);
  ASSERT_EQ(data->labels.size(), 10000u);
  std::vector<int> per_class(10, 0);
  for (int32_t label : data->labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  EXPECT_EQ(per_class, std::vector<int>(10, 1000));
  float min = 1, max = 0;
  for (float f : data->features) {
    min = std::min(min, f);
    max = std::max(max, f);
  }
  EXPECT_EQ(min, 0.0f);
  EXPECT_EQ(max, 1.0f);
}

}  // namespace
}  // namespace ampd::engine
