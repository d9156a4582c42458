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

std::string Write(const std::string& name, const std::string& text) {
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir =
      absl::StrCat(testing::TempDir(), test->test_suite_name(), ".", test->name());
  std::filesystem::create_directories(dir);
  const std::string path = absl::StrCat(dir, "/", name);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return path;
  EXPECT_EQ(std::fwrite(text.data(), 1, text.size(), file), text.size());
  std::fclose(file);
  return path;
}

testing::AssertionResult IsInvalid(const absl::Status& status,
                                   std::initializer_list<std::string> parts) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    return testing::AssertionFailure() << "want INVALID_ARGUMENT, got " << status;
  }
  for (const std::string& part : parts) {
    if (!absl::StrContains(status.message(), part)) {
      return testing::AssertionFailure() << "'" << status.message() << "' lacks '" << part << "'";
    }
  }
  return testing::AssertionSuccess();
}

TEST(CsvReaderTest, ReadsWithHeader) {
  const absl::StatusOr<data::Dataset> data =
      data::ReadCsvDataset(Write("a.csv", "label,x,y\n1,0.5,-2\n0,3,4e1\n2,1.25,0\n"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 3);
  EXPECT_EQ(data->feature_dim, 2);
  EXPECT_EQ(data->num_classes, 3);  // max label + 1
  EXPECT_EQ(data->labels, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(data->features, (std::vector<float>{0.5f, -2, 3, 40, 1.25f, 0}));
}

TEST(CsvReaderTest, NumericFirstLineIsData) {
  const absl::StatusOr<data::Dataset> data = data::ReadCsvDataset(Write("a.csv", "1,0.5\n0,3\n"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_examples, 2);
  EXPECT_EQ(data->labels, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(data->features, (std::vector<float>{0.5f, 3}));
}

TEST(CsvReaderTest, LabelColumnCountsFromTheEndWhenNegative) {
  const std::string path = Write("a.csv", "x,y,z,label\n1,2,3,4\n5,6,7,0\n");
  data::CsvOptions last;
  last.label_column = -1;
  absl::StatusOr<data::Dataset> data = data::ReadCsvDataset(path, last);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->labels, (std::vector<int32_t>{4, 0}));
  EXPECT_EQ(data->features, (std::vector<float>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(data->num_classes, 5);

  data::CsvOptions middle;
  middle.label_column = 1;  // the same column as -3
  data = data::ReadCsvDataset(path, middle);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->labels, (std::vector<int32_t>{2, 6}));
  EXPECT_EQ(data->features, (std::vector<float>{1, 3, 4, 5, 7, 0}));
  middle.label_column = -3;
  absl::StatusOr<data::Dataset> same = data::ReadCsvDataset(path, middle);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->labels, data->labels);

  data::CsvOptions outside;
  outside.label_column = -5;
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(path, outside).status(),
                        {path, "line 1", "label_column -5 is out of range for 4 columns"}));
  outside.label_column = 4;
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(path, outside).status(), {path, "label_column 4"}));
}

TEST(CsvReaderTest, ToleratesCrLfBlankLinesSpacesAndBom) {
  const absl::StatusOr<data::Dataset> data =
      data::ReadCsvDataset(Write("a.csv", "\xEF\xBB\xBFlabel, x\r\n\r\n 1 , 2.5 \r\n\n0,1\r\n\n"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->labels, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(data->features, (std::vector<float>{2.5f, 1}));
}

TEST(CsvReaderTest, NonNumericCellNamesLineAndColumn) {
  const std::string path = Write("a.csv", "label,x,y\n1,2,3\n0,abc,4\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(path).status(),
                        {path, "line 3, column 2", "cannot parse 'abc' as a finite number"}));
  const std::string nan = Write("nan.csv", "1,2,3\n0,4,nan\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(nan).status(), {nan, "line 2, column 3", "'nan'"}));
  const std::string empty_cell = Write("empty_cell.csv", "1,2,3\n0,,4\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(empty_cell).status(),
                        {empty_cell, "line 2, column 2: empty cell"}));
}

TEST(CsvReaderTest, RaggedRowIsAnError) {
  const std::string path = Write("a.csv", "label,x,y\n1,2,3\n0,4\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(path).status(),
                        {path, "line 3: 2 columns, expected 3 (as on line 1)"}));
  const std::string longer = Write("longer.csv", "1,2\n0,4,5\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(longer).status(), {longer, "line 2: 3 columns"}));
}

TEST(CsvReaderTest, BadLabels) {
  const std::string negative = Write("negative.csv", "1,2\n-1,3\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(negative).status(),
                        {negative, "line 2, column 1", "negative label -1"}));
  const std::string fraction = Write("fraction.csv", "1,2\n2.5,3\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(fraction).status(),
                        {fraction, "line 2, column 1", "label 2.5 is not a class index"}));
  // Integral values written as floats are fine.
  const absl::StatusOr<data::Dataset> data =
      data::ReadCsvDataset(Write("float.csv", "1.0,2\n3e0,3\n"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->labels, (std::vector<int32_t>{1, 3}));
}

TEST(CsvReaderTest, NumClassesBoundsLabels) {
  const std::string path = Write("a.csv", "x,label\n0.1,0\n0.2,3\n0.3,1\n");
  data::CsvOptions options;
  options.label_column = -1;
  options.num_classes = 10;
  absl::StatusOr<data::Dataset> data = data::ReadCsvDataset(path, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_classes, 10);  // given, not inferred
  options.num_classes = 3;
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(path, options).status(),
                        {path, "line 3, column 2", "label 3 out of range: num_classes is 3"}));
  options.num_classes = -1;
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(path, options).status(), {path, "num_classes"}));
}

TEST(CsvReaderTest, EmptyOrDegenerateFiles) {
  const std::string empty = Write("empty.csv", "");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(empty).status(), {empty, "no data rows"}));
  const std::string header_only = Write("header.csv", "label,x\n");
  EXPECT_TRUE(IsInvalid(data::ReadCsvDataset(header_only).status(), {header_only, "no data rows"}));
  const std::string one_column = Write("one.csv", "1\n2\n");
  EXPECT_TRUE(
      IsInvalid(data::ReadCsvDataset(one_column).status(), {one_column, "line 1", "1 column"}));
}

TEST(CsvReaderTest, MissingFile) {
  const std::string path = absl::StrCat(testing::TempDir(), "no-such.csv");
  const absl::Status status = data::ReadCsvDataset(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), path)) << status;
}

}  // namespace
}  // namespace ampd::engine
