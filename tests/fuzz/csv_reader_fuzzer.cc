// libFuzzer target: arbitrary bytes as a CSV file through ReadCsvDataset, with
// the label first and last. Build and run with tools/fuzz.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ampd::fuzz::WriteFile("input.csv", data, size);
  for (int label_column : {0, -1}) {
    ampd::engine::data::CsvOptions options;
    options.label_column = label_column;
    (void)ampd::engine::data::ReadCsvDataset(path, options);
  }
  return 0;
}
