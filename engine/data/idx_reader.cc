// IDX (MNIST-format) files, raw or gzipped.
//
// Byte offsets in errors count bytes of IDX data, i.e. after decompression:
// that is what the IDX header describes and what a hex dump of the unpacked
// file shows. Only damage to the gzip stream itself is placed in the
// compressed file.

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "engine/data/dataset.h"

namespace ampd::engine::data {
namespace {

// Far above any real IDX set (Fashion-MNIST train holds 4.7e7 values), yet a
// corrupt header cannot make us accept a size we could not hold as floats.
constexpr int64_t kMaxIdxElements = int64_t{1} << 32;
constexpr size_t kChunkBytes = size_t{1} << 16;
constexpr uint8_t kTypeUnsignedByte = 0x08;

// An IDX file read front to back; through zlib when it starts with the gzip
// magic, so a misnamed file still reads.
class IdxFile {
 public:
  static absl::StatusOr<std::unique_ptr<IdxFile>> Open(const std::string& path);

  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;
  ~IdxFile() {
    if (raw_ != nullptr) std::fclose(raw_);
    if (gz_ != nullptr) gzclose(gz_);
  }

  // Up to n bytes; fewer only where the data ends.
  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n);

  // "PATH: PROBLEM at byte offset N[: DETAIL]".
  absl::Status Error(absl::string_view problem, int64_t offset,
                     absl::string_view detail = "") const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", problem, " at byte offset ", offset,
                                                   detail.empty() ? "" : ": ", detail));
  }

  int64_t offset() const { return offset_; }
  // True when a gzip stream stopped before its end marker, i.e. the .gz file
  // itself was cut short rather than the IDX data inside it.
  bool gzip_cut() const { return gzip_cut_; }

 private:
  explicit IdxFile(std::string path) : path_(std::move(path)) {}

  std::string path_;
  std::FILE* raw_ = nullptr;
  gzFile gz_ = nullptr;
  int64_t offset_ = 0;
  bool gzip_cut_ = false;
};

absl::Status OpenError(const std::string& path, int err, absl::string_view action) {
  std::string message = absl::StrCat(path, ": cannot ", action, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<std::unique_ptr<IdxFile>> IdxFile::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return OpenError(path, errno, "open");
  std::array<unsigned char, 2> magic{};
  const size_t got = std::fread(magic.data(), 1, magic.size(), file);
  if (std::ferror(file)) {
    const int err = errno;  // EISDIR: fopen accepts a directory, reading it fails.
    std::fclose(file);
    return OpenError(path, err, "read");
  }
  std::unique_ptr<IdxFile> idx(new IdxFile(path));
  if (got < 2 || magic[0] != 0x1f || magic[1] != 0x8b) {
    std::rewind(file);
    idx->raw_ = file;
    return idx;
  }
  std::fclose(file);
  errno = 0;
  idx->gz_ = gzopen(path.c_str(), "rb");
  if (idx->gz_ == nullptr) return OpenError(path, errno != 0 ? errno : ENOMEM, "open");
  // Larger than zlib's 8 KiB default: the 26 MB training images decode faster.
  gzbuffer(idx->gz_, 1 << 17);
  return idx;
}

absl::StatusOr<size_t> IdxFile::Read(uint8_t* dst, size_t n) {
  size_t total = 0;
  if (raw_ != nullptr) {
    total = std::fread(dst, 1, n, raw_);
    if (total < n && std::ferror(raw_)) {
      return Error("read error", offset_ + static_cast<int64_t>(total), std::strerror(errno));
    }
  } else {
    while (total < n) {
      // gzread counts in unsigned int.
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n - total, 1u << 30));
      const int got = gzread(gz_, dst + total, want);
      int zerr = Z_OK;
      if (got < 0) {
        // zlib decodes ahead of what we asked for, so the IDX offset says little
        // about where the damage is; the compressed offset (where inflate
        // stopped) does.
        absl::string_view message = gzerror(gz_, &zerr);
        absl::ConsumePrefix(&message, absl::StrCat(path_, ": "));  // zlib adds the path
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": corrupt gzip data at byte offset ", gzoffset(gz_),
                         " of the compressed file: ", message, " (IDX data read up to byte offset ",
                         offset_ + static_cast<int64_t>(total), ")"));
      }
      if (got == 0) {
        // zlib reports a stream cut short as a soft Z_BUF_ERROR and returns 0
        // (as at end of file), so only gzerror tells the two apart.
        gzerror(gz_, &zerr);
        gzip_cut_ = zerr == Z_BUF_ERROR;
        break;
      }
      total += static_cast<size_t>(got);
    }
  }
  offset_ += static_cast<int64_t>(total);
  return total;
}

absl::Status Truncated(const IdxFile& file, int64_t expected, absl::string_view what) {
  return file.Error("truncated", file.offset(),
                    absl::StrCat("expected ", expected, " bytes of ", what,
                                 file.gzip_cut() ? " (the gzip stream ends early)" : ""));
}

absl::Status ReadExact(IdxFile& file, uint8_t* dst, size_t n, absl::string_view what) {
  absl::StatusOr<size_t> got = file.Read(dst, n);
  if (!got.ok()) return got.status();
  if (*got < n) return Truncated(file, static_cast<int64_t>(n), what);
  return absl::OkStatus();
}

// Streams `n` bytes in fixed chunks, so memory grows only with data that is
// really there: a header that promises gigabytes fails on truncation instead
// of on a huge allocation. `consume` gets each chunk and its start offset.
absl::Status ReadPayload(
    IdxFile& file, int64_t n, absl::string_view what,
    const std::function<absl::Status(const uint8_t*, size_t, int64_t)>& consume) {
  std::vector<uint8_t> chunk(kChunkBytes);
  int64_t left = n;
  while (left > 0) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(left, kChunkBytes));
    const int64_t start = file.offset();
    absl::StatusOr<size_t> got = file.Read(chunk.data(), want);
    if (!got.ok()) return got.status();
    if (absl::Status status = consume(chunk.data(), *got, start); !status.ok()) return status;
    if (*got < want) return Truncated(file, n, what);
    left -= static_cast<int64_t>(*got);
  }
  return absl::OkStatus();
}

absl::Status ExpectEnd(IdxFile& file) {
  const int64_t end = file.offset();
  uint8_t extra = 0;
  absl::StatusOr<size_t> got = file.Read(&extra, 1);
  if (!got.ok()) return got.status();
  if (*got != 0) {
    return file.Error("unexpected data", end,
                      absl::StrCat("the header describes ", end, " bytes in all"));
  }
  // Every byte arrived, but without the gzip trailer its CRC was never checked.
  if (file.gzip_cut()) {
    return file.Error("truncated gzip stream", end, "the gzip trailer (CRC) is missing");
  }
  return absl::OkStatus();
}

enum class Kind { kImages, kLabels };

struct IdxHeader {
  int64_t count = 0;                // the first dimension
  int64_t item_size = 1;            // product of the others
  std::vector<int64_t> item_shape;  // the others
};

absl::StatusOr<IdxHeader> ReadHeader(IdxFile& file, Kind kind) {
  std::array<uint8_t, 4> magic{};
  if (absl::Status s = ReadExact(file, magic.data(), magic.size(), "header (magic)"); !s.ok()) {
    return s;
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return file.Error("bad magic", 0,
                      absl::StrFormat("got %02x %02x %02x %02x, expected 00 00 <type> <rank> "
                                      "(not an IDX file?)",
                                      magic[0], magic[1], magic[2], magic[3]));
  }
  if (magic[2] != kTypeUnsignedByte) {
    return file.Error(absl::StrFormat("unsupported element type 0x%02x", magic[2]), 2,
                      "only 0x08 (unsigned byte) is supported");
  }
  const int rank = magic[3];
  if (kind == Kind::kImages && rank < 2) {
    return file.Error(absl::StrCat("unsupported rank ", rank), 3,
                      "an image file needs rank >= 2 (count, then the image shape)");
  }
  if (kind == Kind::kLabels && rank != 1) {
    return file.Error(absl::StrCat("unsupported rank ", rank), 3, "a label file has rank 1");
  }

  std::vector<uint8_t> raw_dims(4 * static_cast<size_t>(rank));
  if (absl::Status s = ReadExact(file, raw_dims.data(), raw_dims.size(),
                                 absl::StrCat("header (", rank, " dimensions)"));
      !s.ok()) {
    return s;
  }
  IdxHeader header;
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* p = &raw_dims[4 * static_cast<size_t>(i)];
    const int64_t dim = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3];
    const int64_t offset = 4 + 4 * int64_t{i};
    if (dim == 0) {
      return file.Error(absl::StrCat("dimension ", i, " is 0"), offset,
                        i == 0 ? "the file holds no examples" : "examples would be empty");
    }
    // Checked before multiplying, so the product can never overflow.
    if (dim > kMaxIdxElements / elements) {
      return file.Error(absl::StrCat("dimension ", i, " (", dim, ") too large"), offset,
                        absl::StrCat("more than ", kMaxIdxElements, " elements in all"));
    }
    elements *= dim;
    if (i == 0) {
      header.count = dim;
    } else {
      header.item_size *= dim;
      header.item_shape.push_back(dim);
    }
  }
  return header;
}

absl::StatusOr<std::unique_ptr<IdxFile>> OpenWithHeader(const std::string& path, Kind kind,
                                                        IdxHeader* header) {
  absl::StatusOr<std::unique_ptr<IdxFile>> file = IdxFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<IdxHeader> read = ReadHeader(**file, kind);
  if (!read.ok()) return read.status();
  *header = *read;
  return file;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

}  // namespace

absl::StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path, int num_classes) {
  if (num_classes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("ReadIdxDataset(", images_path, ", ",
                                                   labels_path, "): num_classes must be > 0, got ",
                                                   num_classes));
  }
  // Both headers first: a count mismatch shows before decoding megabytes.
  IdxHeader image_header;
  absl::StatusOr<std::unique_ptr<IdxFile>> images =
      OpenWithHeader(images_path, Kind::kImages, &image_header);
  if (!images.ok()) return images.status();
  IdxHeader label_header;
  absl::StatusOr<std::unique_ptr<IdxFile>> labels =
      OpenWithHeader(labels_path, Kind::kLabels, &label_header);
  if (!labels.ok()) return labels.status();
  if (label_header.count != image_header.count) {
    return (*labels)->Error("count mismatch", 4,
                            absl::StrCat(label_header.count, " labels, but ", images_path,
                                         " holds ", image_header.count, " images"));
  }

  Dataset dataset;
  dataset.num_examples = image_header.count;
  dataset.feature_dim = image_header.item_size;
  dataset.num_classes = num_classes;
  // Images keep their shape: one channel, then the file's dims ([1, 28, 28]).
  dataset.example_shape = {1};
  dataset.example_shape.insert(dataset.example_shape.end(), image_header.item_shape.begin(),
                               image_header.item_shape.end());

  // No reserve() from header counts, here or for the features: until the
  // data arrives the counts are only claims.
  IdxFile& label_file = **labels;
  absl::Status status = ReadPayload(
      label_file, label_header.count, "label data",
      [&](const uint8_t* data, size_t n, int64_t start) -> absl::Status {
        for (size_t i = 0; i < n; ++i) {
          if (data[i] >= num_classes) {
            return label_file.Error(absl::StrCat("label ", int{data[i]}, " out of range"),
                                    start + static_cast<int64_t>(i),
                                    absl::StrCat("num_classes is ", num_classes));
          }
          dataset.labels.push_back(data[i]);
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  if (status = ExpectEnd(label_file); !status.ok()) return status;

  std::array<float, 256> scale{};
  for (int i = 0; i < 256; ++i) scale[i] = static_cast<float>(i) / 255.0f;
  const int64_t image_bytes = image_header.count * image_header.item_size;
  status = ReadPayload(**images, image_bytes, "image data",
                       [&](const uint8_t* data, size_t n, int64_t) -> absl::Status {
                         const size_t old = dataset.features.size();
                         dataset.features.resize(old + n);
                         std::transform(data, data + n, dataset.features.begin() + old,
                                        [&](uint8_t b) { return scale[b]; });
                         return absl::OkStatus();
                       });
  if (!status.ok()) return status;
  if (status = ExpectEnd(**images); !status.ok()) return status;
  return dataset;
}

absl::StatusOr<Dataset> LoadMnistStyle(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  // The canonical files are gzipped; an unpacked copy is used when that is all
  // there is. A missing pair reports the .gz name.
  auto pick = [&](const std::string& stem) {
    const std::string gz = JoinPath(dir, stem + ".gz");
    const std::string raw = JoinPath(dir, stem);
    std::error_code error;
    if (!std::filesystem::exists(gz, error) && std::filesystem::exists(raw, error)) return raw;
    return gz;
  };
  return ReadIdxDataset(pick(prefix + "-images-idx3-ubyte"), pick(prefix + "-labels-idx1-ubyte"),
                        10);
}

}  // namespace ampd::engine::data
