#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/io/atomic_file.h"
#include "engine/io/errno_status.h"

namespace ampd::engine::io {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this code copies host bytes as they are");

namespace {

// The reference implementation refuses headers above 100 MB; so do we, which
// also bounds what a hostile length field can make us allocate.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Far above any real tensor's rank, and bounds the work a hostile header can
// cause per byte.
constexpr size_t kMaxRank = 1024;

// ---------------------------------------------------------------------------
// Writing.

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= n) return false;  // truncated sequence
    for (int k = 1; k <= extra; ++k) {
      const uint8_t cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

void AppendJsonString(const std::string& s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    const uint8_t c = static_cast<uint8_t>(ch);
    switch (ch) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

// ---------------------------------------------------------------------------
// Reading.

absl::Status Corrupt(const std::string& source, uint64_t offset, const std::string& message) {
  return absl::DataLossError(absl::StrCat(source, ": offset ", offset, ": ", message));
}

struct ParsedEntry {
  SafetensorsEntry entry;
  uint64_t header_offset = 0;  // where its name starts in the file
};

// A JSON parser for exactly the safetensors header schema: an object whose
// values are tensor entries ({"dtype": string, "shape": [uint...],
// "data_offsets": [uint, uint]}) or, under "__metadata__", an object of
// strings. Nesting is fixed, so there is no recursion to exhaust the stack.
// Every failure records an error naming the file offset and returns false.
class HeaderParser {
 public:
  HeaderParser(const char* text, size_t size, const std::string& source)
      : p_(text), n_(size), source_(source) {}

  bool Parse(std::vector<ParsedEntry>* entries, std::map<std::string, std::string>* metadata) {
    if (n_ == 0 || p_[0] != '{') return Fail("the header must start with '{'");
    ++pos_;
    SkipSpace();
    bool seen_metadata = false;
    std::set<std::string> names;
    if (!Consume('}')) {
      while (true) {
        const size_t key_pos = pos_;
        std::string key;
        if (!ParseString(&key)) return false;
        SkipSpace();
        if (!Expect(':')) return false;
        SkipSpace();
        if (key == "__metadata__") {
          if (seen_metadata) return FailAt(key_pos, "duplicate \"__metadata__\"");
          seen_metadata = true;
          if (!ParseMetadata(metadata)) return false;
        } else {
          if (!names.insert(key).second) {
            return FailAt(key_pos, absl::StrCat("duplicate tensor name \"", key, "\""));
          }
          ParsedEntry parsed;
          parsed.header_offset = Offset(key_pos);
          parsed.entry.name = std::move(key);
          if (!ParseTensorInfo(&parsed)) return false;
          entries->push_back(std::move(parsed));
        }
        SkipSpace();
        if (Consume(',')) {
          SkipSpace();
          continue;
        }
        if (Consume('}')) break;
        return Fail("expected ',' or '}' after a header entry");
      }
    }
    SkipSpace();  // the padding
    if (pos_ != n_) return Fail("unexpected bytes after the header's JSON object");
    return true;
  }

  const absl::Status& error() const { return error_; }

 private:
  uint64_t Offset(size_t pos) const { return 8 + static_cast<uint64_t>(pos); }

  bool FailAt(size_t pos, const std::string& message) {
    error_ = Corrupt(source_, Offset(pos), message);
    return false;
  }
  bool Fail(const std::string& message) { return FailAt(pos_, message); }

  void SkipSpace() {
    while (pos_ < n_ &&
           (p_[pos_] == ' ' || p_[pos_] == '\t' || p_[pos_] == '\n' || p_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (pos_ < n_ && p_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Expect(char c) {
    if (Consume(c)) return true;
    if (pos_ >= n_)
      return Fail(absl::StrCat("header ends where '", std::string(1, c), "' was expected"));
    return Fail(absl::StrCat("expected '", std::string(1, c), "'"));
  }

  bool ParseHex4(uint32_t* out) {
    if (n_ - pos_ < 4) return Fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = p_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return Fail("invalid hex digit in \\u escape");
      }
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool ParseString(std::string* out) {
    if (pos_ >= n_) return Fail("header ends where a string was expected");
    if (p_[pos_] != '"') return Fail("expected a string");
    const size_t start = pos_;
    ++pos_;
    out->clear();
    while (true) {
      if (pos_ >= n_) return FailAt(start, "unterminated string");
      const char c = p_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<uint8_t>(c) < 0x20) return Fail("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= n_) return FailAt(start, "unterminated string");
      const char e = p_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp;
          if (!ParseHex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return FailAt(pos_ - 6, "unpaired low surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (n_ - pos_ < 2 || p_[pos_] != '\\' || p_[pos_ + 1] != 'u') {
              return FailAt(pos_ - 6, "unpaired high surrogate");
            }
            pos_ += 2;
            uint32_t low;
            if (!ParseHex4(&low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) return FailAt(pos_ - 6, "expected a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return FailAt(pos_ - 2, "invalid escape in a string");
      }
    }
  }

  bool ParseUint(uint64_t* out) {
    if (pos_ >= n_) return Fail("header ends where an integer was expected");
    const char first = p_[pos_];
    if (first == '-') return Fail("expected a non-negative integer, got a negative number");
    if (first < '0' || first > '9') return Fail("expected a non-negative integer");
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < n_ && p_[pos_] >= '0' && p_[pos_] <= '9') {
      const uint64_t d = static_cast<uint64_t>(p_[pos_] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) {
        return FailAt(start, "integer does not fit in 64 bits");
      }
      v = v * 10 + d;
      ++pos_;
    }
    if (first == '0' && pos_ - start > 1) return FailAt(start, "integer with a leading zero");
    if (pos_ < n_ && (p_[pos_] == '.' || p_[pos_] == 'e' || p_[pos_] == 'E')) {
      return FailAt(start, "expected an integer, got a number with a fraction or exponent");
    }
    *out = v;
    return true;
  }

  bool ParseUintArray(std::vector<uint64_t>* out, size_t max_items, const char* what) {
    out->clear();
    if (!Expect('[')) return false;
    SkipSpace();
    if (Consume(']')) return true;
    while (true) {
      if (out->size() == max_items) {
        return Fail(absl::StrCat(what, " has more than ", max_items, " elements"));
      }
      uint64_t v;
      if (!ParseUint(&v)) return false;
      out->push_back(v);
      SkipSpace();
      if (Consume(',')) {
        SkipSpace();
        continue;
      }
      if (Consume(']')) return true;
      return Fail(absl::StrCat("expected ',' or ']' in ", what));
    }
  }

  bool ParseMetadata(std::map<std::string, std::string>* metadata) {
    if (n_ - pos_ >= 4 && std::memcmp(p_ + pos_, "null", 4) == 0) {
      pos_ += 4;
      return true;
    }
    if (!Expect('{')) return false;
    SkipSpace();
    if (Consume('}')) return true;
    while (true) {
      const size_t key_pos = pos_;
      std::string key;
      if (!ParseString(&key)) return false;
      SkipSpace();
      if (!Expect(':')) return false;
      SkipSpace();
      if (pos_ < n_ && p_[pos_] != '"') {
        return Fail(absl::StrCat("__metadata__ value of \"", key, "\" must be a string"));
      }
      std::string value;
      if (!ParseString(&value)) return false;
      if (!metadata->emplace(std::move(key), std::move(value)).second) {
        return FailAt(key_pos, "duplicate key in __metadata__");
      }
      SkipSpace();
      if (Consume(',')) {
        SkipSpace();
        continue;
      }
      if (Consume('}')) return true;
      return Fail("expected ',' or '}' in __metadata__");
    }
  }

  bool ParseTensorInfo(ParsedEntry* parsed) {
    SafetensorsEntry& entry = parsed->entry;
    const std::string where = absl::StrCat("tensor \"", entry.name, "\"");
    if (pos_ < n_ && p_[pos_] != '{') return Fail(absl::StrCat(where, ": expected an object"));
    if (!Expect('{')) return false;
    SkipSpace();
    bool has_dtype = false, has_shape = false, has_offsets = false;
    std::string dtype_name;
    size_t dtype_pos = 0;
    std::vector<uint64_t> shape, offsets;
    if (!Consume('}')) {
      while (true) {
        const size_t key_pos = pos_;
        std::string key;
        if (!ParseString(&key)) return false;
        SkipSpace();
        if (!Expect(':')) return false;
        SkipSpace();
        bool* seen = nullptr;
        if (key == "dtype") {
          seen = &has_dtype;
          dtype_pos = pos_;
          if (!ParseString(&dtype_name)) return false;
        } else if (key == "shape") {
          seen = &has_shape;
          if (!ParseUintArray(&shape, kMaxRank, "shape")) return false;
        } else if (key == "data_offsets") {
          seen = &has_offsets;
          if (!ParseUintArray(&offsets, 2, "data_offsets")) return false;
        } else {
          return FailAt(key_pos, absl::StrCat(where, ": unknown field \"", key, "\""));
        }
        if (*seen) return FailAt(key_pos, absl::StrCat(where, ": duplicate field \"", key, "\""));
        *seen = true;
        SkipSpace();
        if (Consume(',')) {
          SkipSpace();
          continue;
        }
        if (Consume('}')) break;
        return Fail(absl::StrCat(where, ": expected ',' or '}'"));
      }
    }
    if (!has_dtype || !has_shape || !has_offsets) {
      return FailAt(parsed->header_offset - 8, absl::StrCat(where, ": missing field \"",
                                                            !has_dtype   ? "dtype"
                                                            : !has_shape ? "shape"
                                                                         : "data_offsets",
                                                            "\""));
    }
    if (offsets.size() != 2) {
      return FailAt(parsed->header_offset - 8,
                    absl::StrCat(where, ": data_offsets must be [begin, end], got ", offsets.size(),
                                 " values"));
    }
    if (dtype_name == "F32") {
      entry.dtype = DType::kF32;
    } else if (dtype_name == "F16") {
      entry.dtype = DType::kF16;
    } else if (dtype_name == "BF16") {
      entry.dtype = DType::kBF16;
    } else if (dtype_name == "F64") {
      entry.dtype = DType::kF64;
    } else if (dtype_name == "U8") {
      entry.dtype = DType::kU8;
    } else {
      static const char* const kOtherKnown[] = {
          "BOOL",    "I8",      "I16",     "U16",     "I32",     "U32", "I64", "U64",
          "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};
      const bool known = std::find(std::begin(kOtherKnown), std::end(kOtherKnown), dtype_name) !=
                         std::end(kOtherKnown);
      std::string shown;
      AppendJsonString(dtype_name, &shown);
      error_ = Corrupt(source_, Offset(dtype_pos),
                       absl::StrCat(where, ": ", known ? "unsupported" : "unknown", " dtype ",
                                    shown, " (supported: F32, F16, BF16, F64, U8)"));
      if (known) error_ = absl::UnimplementedError(error_.message());
      return false;
    }
    for (uint64_t d : shape) {
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return FailAt(parsed->header_offset - 8,
                      absl::StrCat(where, ": shape dimension ", d, " is too large"));
      }
      entry.shape.push_back(static_cast<int64_t>(d));
    }
    entry.begin = offsets[0];
    entry.end = offsets[1];
    return true;
  }

  const char* p_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& source_;
  absl::Status error_;
};

std::string DescribeShape(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Parses the header and checks it against the file: every tensor's byte count
// matches its dtype and shape, and the tensors tile the data section exactly.
absl::StatusOr<SafetensorsHeader> ParseHeader(const char* header, uint64_t header_len,
                                              uint64_t file_size, const std::string& source) {
  std::vector<ParsedEntry> parsed;
  SafetensorsHeader result;
  HeaderParser parser(header, static_cast<size_t>(header_len), source);
  if (!parser.Parse(&parsed, &result.metadata)) return parser.error();
  result.data_start = 8 + header_len;
  const uint64_t data_size = file_size - result.data_start;

  for (const ParsedEntry& p : parsed) {
    const SafetensorsEntry& e = p.entry;
    const std::string where = absl::StrCat("tensor \"", e.name, "\"");
    // numel as the engine computes it (a running product), with no overflow.
    int64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d) {
        return Corrupt(
            source, p.header_offset,
            absl::StrCat(where, ": shape ", DescribeShape(e.shape), " has too many elements"));
      }
      numel *= d;
    }
    const uint64_t elem = DTypeSize(e.dtype);
    if (static_cast<uint64_t>(numel) > std::numeric_limits<uint64_t>::max() / elem) {
      return Corrupt(
          source, p.header_offset,
          absl::StrCat(where, ": shape ", DescribeShape(e.shape), " has too many elements"));
    }
    const uint64_t bytes = static_cast<uint64_t>(numel) * elem;
    if (e.begin > e.end) {
      return Corrupt(
          source, p.header_offset,
          absl::StrCat(where, ": data_offsets [", e.begin, ", ", e.end, "] run backwards"));
    }
    if (e.end > data_size) {
      return Corrupt(source, p.header_offset,
                     absl::StrCat(where, ": data_offsets [", e.begin, ", ", e.end,
                                  "] are out of range: the data section has ", data_size,
                                  " bytes (file truncated?)"));
    }
    if (e.end - e.begin != bytes) {
      return Corrupt(
          source, p.header_offset,
          absl::StrCat(where, ": shape ", DescribeShape(e.shape), " of ",
                       SafetensorsDTypeName(e.dtype), " needs ", bytes, " bytes but data_offsets [",
                       e.begin, ", ", e.end, "] span ", e.end - e.begin));
    }
  }

  std::stable_sort(parsed.begin(), parsed.end(), [](const ParsedEntry& a, const ParsedEntry& b) {
    return a.entry.begin != b.entry.begin ? a.entry.begin < b.entry.begin
                                          : a.entry.end < b.entry.end;
  });
  uint64_t covered = 0;
  const ParsedEntry* previous = nullptr;
  for (const ParsedEntry& p : parsed) {
    const SafetensorsEntry& e = p.entry;
    if (e.begin < covered) {
      return Corrupt(
          source, p.header_offset,
          absl::StrCat("tensor \"", e.name, "\" (data_offsets [", e.begin, ", ", e.end,
                       "]) overlaps tensor \"", previous->entry.name, "\" (data_offsets [",
                       previous->entry.begin, ", ", previous->entry.end, "])"));
    }
    if (e.begin > covered) {
      return Corrupt(
          source, p.header_offset,
          absl::StrCat("tensor \"", e.name, "\" starts at data offset ", e.begin,
                       ", leaving a gap of ", e.begin - covered, " bytes after data offset ",
                       covered, "; tensors must be contiguous"));
    }
    covered = e.end;
    previous = &p;
  }
  if (covered != data_size) {
    return Corrupt(source, result.data_start + covered,
                   absl::StrCat("the data section has ", data_size, " bytes but the tensors cover ",
                                covered, "; ", data_size - covered, " trailing bytes"));
  }
  result.entries.reserve(parsed.size());
  for (ParsedEntry& p : parsed) result.entries.push_back(std::move(p.entry));
  return result;
}

// Checks the file's size against the 8-byte length prefix; returns N.
absl::StatusOr<uint64_t> HeaderLength(const uint8_t* prefix, uint64_t file_size,
                                      const std::string& source) {
  if (file_size < 8) {
    return absl::DataLossError(absl::StrCat(source, ": the file has ", file_size,
                                            " bytes, too few for the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  if (n > file_size - 8) {
    return Corrupt(
        source, 0,
        absl::StrCat("header length ", n, " exceeds the ", file_size - 8,
                     " bytes after the length field (file truncated or not safetensors)"));
  }
  if (n > kMaxHeaderBytes) {
    return Corrupt(source, 0,
                   absl::StrCat("header length ", n, " exceeds the limit of ", kMaxHeaderBytes));
  }
  return n;
}

absl::Status ReadFully(int fd, void* buf, uint64_t size, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(buf);
  while (size > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30));
    const ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read", path);
    }
    if (n == 0) {
      return Corrupt(path, offset,
                     "unexpected end of file (was the file truncated while reading?)");
    }
    p += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::StatusOr<SafetensorsHeader> ReadHeaderFromFd(int fd, uint64_t file_size,
                                                   const std::string& path) {
  uint8_t prefix[8] = {0};
  if (file_size >= 8) {
    absl::Status status = ReadFully(fd, prefix, 8, 0, path);
    if (!status.ok()) return status;
  }
  absl::StatusOr<uint64_t> n = HeaderLength(prefix, file_size, path);
  if (!n.ok()) return n.status();
  std::string header(static_cast<size_t>(*n), '\0');
  absl::Status status = ReadFully(fd, header.data(), *n, 8, path);
  if (!status.ok()) return status;
  return ParseHeader(header.data(), *n, file_size, path);
}

absl::StatusOr<uint64_t> OpenForReading(const std::string& path, int* fd_out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  *fd_out = fd;
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF64:
      return "F64";
    case DType::kU8:
      return "U8";
  }
  return "INVALID";
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata,
                              std::string* sha256_hex) {
  const std::string context = absl::StrCat("cannot write ", path, ": ");
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, "tensor \"", name, "\" is undefined"));
    }
    if (tensor.impl()->device != Device::kCpu) {
      return absl::FailedPreconditionError(absl::StrCat(
          context, "tensor \"", name, "\" is not on the CPU; copy it to the CPU first"));
    }
    if (name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat(context, "\"__metadata__\" is reserved, not a tensor name"));
    }
    if (!IsValidUtf8(name)) {
      return absl::InvalidArgumentError(absl::StrCat(context, "a tensor name is not valid UTF-8"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, "duplicate tensor name \"", name, "\""));
    }
  }
  for (const auto& [key, value] : metadata) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, "metadata entry \"", key, "\" is not valid UTF-8"));
    }
  }

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      first = false;
      AppendJsonString(key, &header);
      header += ':';
      AppendJsonString(value, &header);
    }
    header += '}';
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (header.size() > 1) header += ',';
    AppendJsonString(name, &header);
    const uint64_t bytes = tensor.nbytes();
    absl::StrAppend(&header, ":{\"dtype\":\"", SafetensorsDTypeName(tensor.dtype()),
                    "\",\"shape\":[", absl::StrJoin(tensor.shape(), ","), "],\"data_offsets\":[",
                    offset, ",", offset + bytes, "]}");
    offset += bytes;
  }
  header += '}';
  // Pad with spaces so that the data (at 8 + N) starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');

  uint8_t prefix[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(n >> (8 * i));

  absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  absl::Status status = (*writer)->Append(prefix, sizeof(prefix));
  if (status.ok()) status = (*writer)->Append(header.data(), header.size());
  for (size_t i = 0; status.ok() && i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    status = (*writer)->Append(t.raw(), t.nbytes());
  }
  if (status.ok()) status = (*writer)->Commit();
  if (!status.ok()) return status;
  if (sha256_hex != nullptr) *sha256_hex = (*writer)->sha256_hex();
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  int raw_fd = -1;
  absl::StatusOr<uint64_t> size = OpenForReading(path, &raw_fd);
  Fd fd(raw_fd);
  if (!size.ok()) return size.status();
  return ReadHeaderFromFd(fd.get(), *size, path);
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  int raw_fd = -1;
  absl::StatusOr<uint64_t> size = OpenForReading(path, &raw_fd);
  Fd fd(raw_fd);
  if (!size.ok()) return size.status();
  absl::StatusOr<SafetensorsHeader> header = ReadHeaderFromFd(fd.get(), *size, path);
  if (!header.ok()) return header.status();
  SafetensorsFile file;
  file.metadata = std::move(header->metadata);
  for (const SafetensorsEntry& e : header->entries) {
    Tensor t = Tensor::Uninitialized(e.shape, e.dtype);
    absl::Status status =
        ReadFully(fd.get(), t.raw(), e.end - e.begin, header->data_start + e.begin, path);
    if (!status.ok()) return status;
    file.names.push_back(e.name);
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(const void* data, size_t size,
                                                 const std::string& source) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  absl::StatusOr<uint64_t> n = HeaderLength(bytes, size, source);
  if (!n.ok()) return n.status();
  absl::StatusOr<SafetensorsHeader> header =
      ParseHeader(reinterpret_cast<const char*>(bytes) + 8, *n, size, source);
  if (!header.ok()) return header.status();
  SafetensorsFile file;
  file.metadata = std::move(header->metadata);
  for (const SafetensorsEntry& e : header->entries) {
    Tensor t = Tensor::Uninitialized(e.shape, e.dtype);
    if (e.end > e.begin)
      std::memcpy(t.raw(), bytes + header->data_start + e.begin, e.end - e.begin);
    file.names.push_back(e.name);
    file.tensors.emplace(e.name, std::move(t));
  }
  return file;
}

}  // namespace ampd::engine::io
