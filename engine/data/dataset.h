#ifndef AMPD_ENGINE_DATA_DATASET_H_
#define AMPD_ENGINE_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ampd::engine::data {

// A classification data set held in memory: features row-major f32
// (images scaled to [0, 1]), labels in [0, num_classes).
struct Dataset {
  int64_t num_examples = 0;
  int64_t feature_dim = 0;
  int num_classes = 0;
  // One example's shape as a model sees it: [channels, height, width] for
  // images (IDX: [1, H, W]); empty: a vector of feature_dim.
  std::vector<int64_t> example_shape;
  std::vector<float> features;  // num_examples * feature_dim
  std::vector<int32_t> labels;  // num_examples
};

// MNIST-format IDX files (ubyte images of rank >= 2, ubyte labels), gzipped or
// raw (detected by the gzip magic). num_classes = 10 unless given (> 0).
// Errors (INVALID_ARGUMENT / NOT_FOUND) name the file and the byte offset:
// truncated data, bad magic, unsupported element type, label >= num_classes,
// image/label count mismatch.
absl::StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path, int num_classes = 10);

// The standard file names under `dir` (train-images-idx3-ubyte.gz, ...).
// Default dir: /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist).
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
absl::StatusOr<Dataset> LoadMnistStyle(const std::string& dir, bool train);

// CSV: one example per line, numeric columns, the label in `label_column`
// (negative counts from the end). A first line that is not numeric is a header.
// Features are taken as they are (no scaling). num_classes = max label + 1
// unless given. Errors name the file, line and column.
struct CsvOptions {
  int label_column = 0;
  int num_classes = 0;
};
absl::StatusOr<Dataset> ReadCsvDataset(const std::string& path, const CsvOptions& options = {});

// A learnable synthetic set: Gaussian features, labels from a fixed random
// linear teacher. Same spec -> same bytes.
struct SyntheticSpec {
  int64_t num_examples = 1024;
  int64_t feature_dim = 32;
  int num_classes = 4;
  uint64_t seed = 0;
};
absl::StatusOr<Dataset> MakeSyntheticDataset(const SyntheticSpec& spec);

}  // namespace ampd::engine::data

#endif  // AMPD_ENGINE_DATA_DATASET_H_
