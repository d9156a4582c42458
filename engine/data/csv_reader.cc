// Numeric CSV: one example per line, no quoting (none is needed for numbers).

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "engine/data/dataset.h"

namespace ampd::engine::data {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    std::string message = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    return absl::InvalidArgumentError(message);
  }
  std::string content;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) content.append(buffer, got);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": read error at byte offset ",
                                                   content.size(), ": ", std::strerror(err)));
  }
  return content;
}

std::vector<absl::string_view> SplitCells(absl::string_view line) {
  std::vector<absl::string_view> cells = absl::StrSplit(line, ',');
  for (absl::string_view& cell : cells) cell = absl::StripAsciiWhitespace(cell);
  return cells;
}

// Non-finite values are refused: SimpleAtod accepts "nan" and "inf", which
// would only surface later as a NaN loss far from their source.
bool ParseNumber(absl::string_view cell, double* value) {
  return absl::SimpleAtod(cell, value) && std::isfinite(*value);
}

class CsvParser {
 public:
  CsvParser(const std::string& path, const CsvOptions& options) : path_(path), options_(options) {}

  absl::StatusOr<Dataset> Parse(absl::string_view content);

 private:
  absl::Status LineError(int64_t line, absl::string_view detail) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": line ", line, ": ", detail));
  }
  absl::Status CellError(int64_t line, size_t column, absl::string_view detail) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": line ", line, ", column ", column + 1, ": ", detail));
  }
  // Fixes the column layout from the first line.
  absl::Status SetColumns(int64_t line, size_t columns);
  absl::Status ParseRow(int64_t line, const std::vector<absl::string_view>& cells);

  const std::string& path_;
  const CsvOptions& options_;
  int64_t first_line_ = 0;
  size_t columns_ = 0;
  size_t label_column_ = 0;
  int32_t max_label_ = -1;
  Dataset dataset_;
};

absl::Status CsvParser::SetColumns(int64_t line, size_t columns) {
  first_line_ = line;
  columns_ = columns;
  if (columns < 2) {
    return LineError(line, absl::StrCat(columns, " column(s); need a label and a feature"));
  }
  const int64_t label = options_.label_column < 0
                            ? static_cast<int64_t>(columns) + options_.label_column
                            : options_.label_column;
  if (label < 0 || label >= static_cast<int64_t>(columns)) {
    return LineError(line, absl::StrCat("label_column ", options_.label_column,
                                        " is out of range for ", columns, " columns"));
  }
  label_column_ = static_cast<size_t>(label);
  dataset_.feature_dim = static_cast<int64_t>(columns) - 1;
  return absl::OkStatus();
}

absl::Status CsvParser::ParseRow(int64_t line, const std::vector<absl::string_view>& cells) {
  if (cells.size() != columns_) {
    return LineError(line, absl::StrCat(cells.size(), " columns, expected ", columns_,
                                        " (as on line ", first_line_, ")"));
  }
  for (size_t c = 0; c < cells.size(); ++c) {
    double value = 0;
    if (!ParseNumber(cells[c], &value)) {
      return CellError(line, c,
                       cells[c].empty()
                           ? std::string("empty cell")
                           : absl::StrCat("cannot parse '", cells[c], "' as a finite number"));
    }
    if (c != label_column_) {
      dataset_.features.push_back(static_cast<float>(value));
      continue;
    }
    if (value < 0) return CellError(line, c, absl::StrCat("negative label ", cells[c]));
    if (value != std::floor(value) || value > std::numeric_limits<int32_t>::max()) {
      return CellError(line, c, absl::StrCat("label ", cells[c], " is not a class index"));
    }
    const int32_t label = static_cast<int32_t>(value);
    if (options_.num_classes > 0 && label >= options_.num_classes) {
      return CellError(
          line, c,
          absl::StrCat("label ", label, " out of range: num_classes is ", options_.num_classes));
    }
    max_label_ = std::max(max_label_, label);
    dataset_.labels.push_back(label);
  }
  ++dataset_.num_examples;
  return absl::OkStatus();
}

absl::StatusOr<Dataset> CsvParser::Parse(absl::string_view content) {
  if (options_.num_classes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": num_classes must be >= 0 (0: infer from the labels), got ",
                     options_.num_classes));
  }
  // Spreadsheets often save with a UTF-8 byte order mark.
  absl::ConsumePrefix(&content, "\xEF\xBB\xBF");
  int64_t line_number = 0;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    ++line_number;
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    const std::vector<absl::string_view> cells = SplitCells(line);
    if (first) {
      first = false;
      if (absl::Status status = SetColumns(line_number, cells.size()); !status.ok()) {
        return status;
      }
      double unused = 0;
      const bool numeric = std::all_of(cells.begin(), cells.end(), [&](absl::string_view cell) {
        return ParseNumber(cell, &unused);
      });
      if (!numeric) continue;  // a header
    }
    if (absl::Status status = ParseRow(line_number, cells); !status.ok()) return status;
  }
  if (dataset_.num_examples == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": no data rows"));
  }
  dataset_.num_classes = options_.num_classes > 0 ? options_.num_classes : max_label_ + 1;
  return std::move(dataset_);
}

}  // namespace

absl::StatusOr<Dataset> ReadCsvDataset(const std::string& path, const CsvOptions& options) {
  absl::StatusOr<std::string> content = ReadFile(path);
  if (!content.ok()) return content.status();
  return CsvParser(path, options).Parse(*content);
}

}  // namespace ampd::engine::data
