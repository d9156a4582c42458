#include "engine/io/safetensors.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/sha256.h"
#include "gtest/gtest.h"
#include "tests/engine/io/io_test_util.h"

namespace ampd::engine::io {
namespace {

using testing::ListDir;
using testing::MakeTempDir;
using testing::ReadBytes;
using testing::WriteBytes;

using Named = std::vector<std::pair<std::string, Tensor>>;

Tensor FromBits(const std::vector<uint16_t>& bits, const std::vector<int64_t>& shape, DType dtype) {
  Tensor t = Tensor::Uninitialized(shape, dtype);
  std::memcpy(t.raw(), bits.data(), bits.size() * sizeof(uint16_t));
  return t;
}

// Every dtype, with the bit patterns a lossy path would change: signed zero,
// subnormals, infinities, quiet and signaling NaNs with payloads.
Named SampleTensors() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Named tensors;
  tensors.emplace_back("fc1.weight",
                       Tensor::FromVector({1.5f, -2.0f, -0.0f, inf, nan, 1e-45f}, {2, 3}));
  tensors.emplace_back(
      "fc1.bias_f16",
      FromBits({0x3C00, 0x8000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E01, 0x7D00}, {8}, DType::kF16));
  tensors.emplace_back("head.weight_bf16", FromBits({0x3F80, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC1,
                                                     0x7F81, 0x4049, 0xC2F7},
                                                    {3, 1, 3}, DType::kBF16));
  tensors.emplace_back("f64", Tensor::FromDoubles({3.141592653589793, -1e300, 5e-324}, {3}));
  tensors.emplace_back("scalar", Tensor::FromVector({42.0f}, {}));
  tensors.emplace_back("empty", Tensor::Empty({0, 3}, DType::kBF16));
  return tensors;
}

void ExpectSameTensors(const Named& expected, const SafetensorsFile& file) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : expected) names.push_back(name);
  EXPECT_EQ(file.names, names);
  ASSERT_EQ(file.tensors.size(), expected.size());
  for (const auto& [name, want] : expected) {
    auto it = file.tensors.find(name);
    ASSERT_NE(it, file.tensors.end()) << name;
    const Tensor& got = it->second;
    EXPECT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_EQ(got.shape(), want.shape()) << name;
    ASSERT_EQ(got.nbytes(), want.nbytes()) << name;
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << name << ": bytes differ";
  }
}

uint64_t Le64(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  return n;
}

std::string Le64Bytes(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(n >> (8 * i)));
  return s;
}

// A file with this header text (padded to 8 bytes) and data.
std::string MakeFile(const std::string& header, const std::string& data) {
  std::string h = header;
  while ((8 + h.size()) % 8 != 0) h += ' ';
  return Le64Bytes(h.size()) + h + data;
}

TEST(SafetensorsTest, RoundTripsEveryDTypeBitExact) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/model.safetensors";
  const Named tensors = SampleTensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "1200"}};
  std::string sha;
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata, &sha).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectSameTensors(tensors, *file);
  EXPECT_EQ(file->metadata, metadata);
  // Nothing but the file itself is left behind.
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"model.safetensors"});
  // The checksum is that of the file.
  absl::StatusOr<std::string> file_sha = Sha256FileHex(path);
  ASSERT_TRUE(file_sha.ok());
  EXPECT_EQ(sha, *file_sha);
  // The same bytes parse the same from memory.
  const std::string bytes = ReadBytes(path);
  absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(bytes.data(), bytes.size(), "mem");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameTensors(tensors, *parsed);
}

TEST(SafetensorsTest, ExactLayout) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/a.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"a", Tensor::FromVector({1.0f, 2.0f}, {2})}}, {}).ok());
  std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(header.size(), 54u);
  header += "  ";  // 8 + 56 is a multiple of 8
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
  EXPECT_EQ(ReadBytes(path), Le64Bytes(56) + header + data);

  ASSERT_TRUE(
      WriteSafetensors(path, {{"b", Tensor::FromVector({1.0f}, {1}, DType::kBF16)}}, {{"k", "v"}})
          .ok());
  std::string header2 =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}})";
  while ((8 + header2.size()) % 8 != 0) header2 += ' ';
  EXPECT_EQ(ReadBytes(path), Le64Bytes(header2.size()) + header2 + std::string("\x80\x3f", 2));
}

TEST(SafetensorsTest, DataStartsEightByteAligned) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/x.safetensors";
  for (int len = 1; len <= 24; ++len) {
    ASSERT_TRUE(
        WriteSafetensors(
            path, {{std::string(len, 'w'), Tensor::FromVector({1.0f}, {1}, DType::kF16)}}, {})
            .ok());
    const std::string bytes = ReadBytes(path);
    EXPECT_EQ((8 + Le64(bytes)) % 8, 0u) << len;
    EXPECT_EQ(bytes.size(), 8 + Le64(bytes) + 2) << len;
    absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->data_start % 8, 0u);
    ASSERT_EQ(header->entries.size(), 1u);
    EXPECT_EQ(header->entries[0].name, std::string(len, 'w'));
    EXPECT_EQ(header->entries[0].dtype, DType::kF16);
  }
}

TEST(SafetensorsTest, MetadataAndNamesWithSpecialCharacters) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/m.safetensors";
  const std::map<std::string, std::string> metadata = {
      {"quote\"back\\slash", "new\nline\ttab\x01\x1f"},
      {"unicode", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},  // é € 😀
      {"empty", ""},
      {"json", R"({"lr": 0.001, "steps": [1, 2]})"},
  };
  const Named tensors = {{"layer \"0\"/w\\x", Tensor::FromVector({1, 2, 3}, {3})},
                         {"\xc3\xa9t\xc3\xa9", Tensor::FromVector({4}, {1}, DType::kF16)}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, metadata);
  ExpectSameTensors(tensors, *file);
}

TEST(SafetensorsTest, NoTensors) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/none.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {}, {}).ok());
  EXPECT_EQ(ReadBytes(path), Le64Bytes(8) + "{}      ");
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors.empty());
  EXPECT_TRUE(file->metadata.empty());
}

TEST(SafetensorsTest, LargeTensor) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/big.safetensors";
  std::vector<float> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;
  const Named tensors = {{"big", Tensor::FromVector(values, {1024, 1024})},
                         {"big_bf16", Tensor::FromVector(values, {1 << 20}, DType::kBF16)}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {}).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ExpectSameTensors(tensors, *file);
}

TEST(SafetensorsTest, WriterRejectsBadInputWithoutTouchingTheFile) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/bad.safetensors";
  const Tensor t = Tensor::FromVector({1}, {1});
  std::vector<std::pair<Named, std::string>> cases = {
      {{{"a", t}, {"a", t}}, "duplicate tensor name \"a\""},
      {{{"__metadata__", t}}, "reserved"},
      {{{"a", Tensor()}}, "undefined"},
      {{{"bad\xff", t}}, "UTF-8"},
  };
  for (const auto& [tensors, expected] : cases) {
    absl::Status status = WriteSafetensors(path, tensors, {});
    EXPECT_FALSE(status.ok()) << expected;
    EXPECT_NE(status.message().find(expected), std::string::npos) << status;
    EXPECT_NE(status.message().find(path), std::string::npos) << status;
  }
  EXPECT_FALSE(WriteSafetensors(path, {{"a", t}}, {{"k", "\xc0\x80"}}).ok());      // overlong NUL
  EXPECT_FALSE(WriteSafetensors(path, {{"a", t}}, {{"k", "\xed\xa0\x80"}}).ok());  // surrogate
  EXPECT_FALSE(WriteSafetensors(path, {{"a", t}}, {{"k", "\xe2\x82"}}).ok());      // truncated
  // A tensor that is not in host memory.
  Tensor device = Tensor::FromVector({1}, {1});
  device.impl()->device = Device::kCuda;
  absl::Status status = WriteSafetensors(path, {{"d", device}}, {});
  device.impl()->device = Device::kCpu;
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST(SafetensorsTest, UnwritableLocationsFailCleanly) {
  const std::string dir = MakeTempDir();
  const Named tensors = {{"a", Tensor::FromVector({1, 2}, {2})}};
  // A directory that does not exist.
  const std::string missing = dir + "/no/such/dir/model.safetensors";
  absl::Status status = WriteSafetensors(missing, tensors, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_NE(status.message().find(missing), std::string::npos) << status;
  EXPECT_NE(status.message().find("No such file or directory"), std::string::npos) << status;
  // A parent that is a regular file.
  WriteBytes(dir + "/plain", "x");
  const std::string under_file = dir + "/plain/model.safetensors";
  status = WriteSafetensors(under_file, tensors, {});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(under_file), std::string::npos) << status;
  EXPECT_NE(status.message().find("Not a directory"), std::string::npos) << status;
  EXPECT_EQ(ReadBytes(dir + "/plain"), "x");
  // A read-only directory (meaningless as root, which ignores permissions).
  if (::geteuid() != 0) {
    const std::string ro = dir + "/ro";
    ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
    status = WriteSafetensors(ro + "/model.safetensors", tensors, {});
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_TRUE(ListDir(ro).empty());
  }
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"plain"});
}

// A write that runs out of space part-way (here: the file size limit, which
// fails write() with EFBIG as a full disk fails it with ENOSPC) reports the
// error and leaves the previous checkpoint intact, with no temporary file.
TEST(SafetensorsTest, FailedWriteKeepsThePreviousFile) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/model.safetensors";
  const Named small = {{"a", Tensor::FromVector({1, 2}, {2})}};
  ASSERT_TRUE(WriteSafetensors(path, small, {{"step", "1"}}).ok());
  const std::string before = ReadBytes(path);

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit;
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 4096;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(2);
    const Named big = {{"a", Tensor::Zeros({100000}, DType::kF32)}};
    const absl::Status status = WriteSafetensors(path, big, {{"step", "2"}});
    const std::string message(status.message());
    if (::write(pipe_fds[1], message.data(), message.size()) < 0) ::_exit(3);
    ::_exit(status.code() == absl::StatusCode::kResourceExhausted ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0)
    message.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << message;
  EXPECT_NE(message.find(path + ".tmp-"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsTest, ReadErrorsForMissingAndNonRegularFiles) {
  const std::string dir = MakeTempDir();
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(dir + "/nope.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find(dir + "/nope.safetensors"), std::string::npos);
  file = ReadSafetensors(dir);
  EXPECT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("not a regular file"), std::string::npos) << file.status();
}

TEST(SafetensorsTest, AcceptsValidFilesFromOtherWriters) {
  // Whitespace between tokens, escapes, fields in any order, __metadata__ last
  // or null, and header order different from data order.
  const std::string f32_1("\x00\x00\x80\x3f", 4);  // 1.0f
  const std::string f32_2("\x00\x00\x00\x40", 4);  // 2.0f
  const std::string header =
      "{\n  \"b\" : {\"data_offsets\": [4, 8], \"shape\": [1], \"dtype\": \"F32\"},\n"
      "  \"\\u00e9\\ud83d\\ude00\\/\" : {\"dtype\":\"F32\",\"shape\":[ 1 "
      "],\"data_offsets\":[0,4]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"}\n}";
  const std::string bytes = MakeFile(header, f32_1 + f32_2);
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(bytes.data(), bytes.size(), "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string odd_name = "\xc3\xa9\xf0\x9f\x98\x80/";
  EXPECT_EQ(file->names, (std::vector<std::string>{odd_name, "b"}));
  EXPECT_EQ(file->tensors.at(odd_name).Item(), 1.0f);
  EXPECT_EQ(file->tensors.at("b").Item(), 2.0f);
  EXPECT_EQ(file->metadata.at("format"), "pt");

  const std::string null_meta = MakeFile(
      R"({"__metadata__":null,"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", f32_1);
  file = ParseSafetensors(null_meta.data(), null_meta.size(), "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->metadata.empty());
  // Zero-size tensors may share an offset with their neighbours.
  const std::string zeros = MakeFile(
      R"({"e":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"z":{"dtype":"BF16","shape":[2,0],"data_offsets":[4,4]}})",
      f32_1);
  file = ParseSafetensors(zeros.data(), zeros.size(), "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.at("z").shape(), (std::vector<int64_t>{2, 0}));
}

struct BadCase {
  std::string name;
  std::string bytes;
  std::string expected;  // in the error message
};

std::vector<BadCase> BadCases() {
  const std::string d8(8, '\0');
  const auto f32 = [](const std::string& shape, const std::string& offsets) {
    return "{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };
  std::vector<BadCase> cases = {
      {"empty file", "", "too few"},
      {"short file", std::string(7, '\0'), "too few"},
      {"length past end", Le64Bytes(1000) + "{}      ", "exceeds"},
      {"huge length", Le64Bytes(~uint64_t{0}) + "{}      ", "exceeds"},
      {"zero length", Le64Bytes(0), "must start with '{'"},
      {"not an object", MakeFile("[]", ""), "must start with '{'"},
      {"leading space", MakeFile(" {}", ""), "must start with '{'"},
      {"unknown dtype",
       MakeFile("{\"a\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8),
       "unknown dtype \"F17\""},
      {"unsupported dtype",
       MakeFile("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", d8),
       "unsupported dtype \"I64\""},
      {"dtype not a string",
       MakeFile("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", d8),
       "expected a string"},
      {"shape/bytes mismatch", MakeFile("{\"a\":" + f32("[3]", "[0,8]") + "}", d8),
       "needs 12 bytes"},
      {"offsets out of range", MakeFile("{\"a\":" + f32("[4]", "[0,16]") + "}", d8),
       "out of range"},
      {"offsets backwards", MakeFile("{\"a\":" + f32("[1]", "[8,4]") + "}", d8), "backwards"},
      {"overlap",
       MakeFile("{\"a\":" + f32("[2]", "[0,8]") + ",\"b\":" + f32("[1]", "[4,8]") + "}", d8),
       "overlaps"},
      {"gap", MakeFile("{\"a\":" + f32("[1]", "[0,4]") + ",\"b\":" + f32("[0]", "[6,6]") + "}", d8),
       "gap"},
      {"gap at start", MakeFile("{\"a\":" + f32("[1]", "[4,8]") + "}", d8), "gap of 4 bytes"},
      {"trailing data", MakeFile("{\"a\":" + f32("[1]", "[0,4]") + "}", d8), "4 trailing bytes"},
      {"data without tensors", MakeFile("{}", d8), "8 trailing bytes"},
      {"three offsets", MakeFile("{\"a\":" + f32("[1]", "[0,4,4]") + "}", d8),
       "data_offsets has more than 2"},
      {"one offset", MakeFile("{\"a\":" + f32("[1]", "[0]") + "}", d8), "[begin, end]"},
      {"missing field", MakeFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", d8),
       "missing field \"data_offsets\""},
      {"empty entry", MakeFile("{\"a\":{}}", d8), "missing field \"dtype\""},
      {"unknown field",
       MakeFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", d8),
       "unknown field \"x\""},
      {"duplicate field",
       MakeFile(
           "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
           d8),
       "duplicate field \"dtype\""},
      {"duplicate tensor",
       MakeFile("{\"a\":" + f32("[1]", "[0,4]") + ",\"a\":" + f32("[1]", "[4,8]") + "}", d8),
       "duplicate tensor name \"a\""},
      {"duplicate metadata", MakeFile("{\"__metadata__\":{},\"__metadata__\":{}}", ""),
       "duplicate \"__metadata__\""},
      {"duplicate metadata key", MakeFile("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", ""),
       "duplicate key"},
      {"metadata not string", MakeFile("{\"__metadata__\":{\"k\":1}}", ""), "must be a string"},
      {"metadata not object", MakeFile("{\"__metadata__\":[]}", ""), "expected '{'"},
      {"entry not object", MakeFile("{\"a\":[1]}", ""), "expected an object"},
      {"negative dim", MakeFile("{\"a\":" + f32("[-1]", "[0,0]") + "}", ""), "negative"},
      {"fractional dim", MakeFile("{\"a\":" + f32("[2.0]", "[0,8]") + "}", d8), "fraction"},
      {"exponent offset", MakeFile("{\"a\":" + f32("[2]", "[0,8e0]") + "}", d8),
       "fraction or exponent"},
      {"leading zero", MakeFile("{\"a\":" + f32("[02]", "[0,8]") + "}", d8), "leading zero"},
      {"integer overflow", MakeFile("{\"a\":" + f32("[18446744073709551616]", "[0,8]") + "}", d8),
       "does not fit in 64 bits"},
      {"dim too large", MakeFile("{\"a\":" + f32("[9223372036854775808]", "[0,8]") + "}", d8),
       "too large"},
      {"numel overflow",
       MakeFile("{\"a\":" + f32("[4294967296,4294967296,4294967296,0]", "[0,0]") + "}", ""),
       "too many elements"},
      {"bytes overflow", MakeFile("{\"a\":" + f32("[4611686018427387904]", "[0,8]") + "}", d8),
       "too many elements"},
      {"too many dims",
       MakeFile("{\"a\":" +
                    f32(
                        "[" +
                            [] {
                              std::string s = "1";
                              for (int i = 0; i < 1100; ++i) s += ",1";
                              return s;
                            }() +
                            "]",
                        "[0,4]") +
                    "}",
                d8.substr(0, 4)),
       "more than 1024"},
      {"unterminated string", MakeFile("{\"abc", ""), "unterminated string"},
      {"bad escape", MakeFile("{\"a\\x\":{}}", ""), "invalid escape"},
      {"bad unicode escape", MakeFile("{\"a\\u12G4\":{}}", ""), "invalid hex digit"},
      {"lone high surrogate", MakeFile("{\"\\ud800\":{}}", ""), "unpaired high surrogate"},
      {"lone low surrogate", MakeFile("{\"\\udc00\":{}}", ""), "unpaired low surrogate"},
      {"bad surrogate pair", MakeFile("{\"\\ud800\\u0041\":{}}", ""), "expected a low surrogate"},
      {"control character", MakeFile("{\"a\nb\":{}}", ""), "control character"},
      {"trailing comma", MakeFile("{\"a\":" + f32("[1]", "[0,4]") + ",}", d8.substr(0, 4)),
       "expected a string"},
      {"missing colon", MakeFile("{\"a\" " + f32("[1]", "[0,4]") + "}", d8.substr(0, 4)),
       "expected ':'"},
      {"missing comma", MakeFile("{\"a\":" + f32("[1]", "[0,4]") + " \"b\":{}}", d8.substr(0, 4)),
       "expected ',' or '}'"},
      {"garbage after object", MakeFile("{}x", ""), "after the header's JSON object"},
      {"two objects", MakeFile("{}{}", ""), "after the header's JSON object"},
      {"nul padding", Le64Bytes(8) + std::string("{}\0\0\0\0\0\0", 8),
       "after the header's JSON object"},
      {"unclosed object", Le64Bytes(8) + "{\"a\":   ", "header ends where '{' was expected"},
      {"deep nesting", MakeFile("{\"a\":{\"dtype\":" + std::string(5000, '[') + "}}", ""),
       "expected a string"},
      {"header cut in the middle", Le64Bytes(16) + "{\"a\":{\"dtype\":\"F", "unterminated string"},
  };
  return cases;
}

TEST(SafetensorsTest, RejectsMalformedFilesWithClearErrors) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/bad.safetensors";
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.name);
    WriteBytes(path, c.bytes);
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
    ASSERT_FALSE(file.ok());
    const std::string message(file.status().message());
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_EQ(message.rfind(path, 0), 0u) << "the error should start with the path: " << message;
    if (c.bytes.size() >= 8) {
      EXPECT_NE(message.find(": offset "), std::string::npos) << message;
    }
    // The header-only reader and the in-memory parser agree.
    absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
    EXPECT_FALSE(header.ok());
    absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(c.bytes.data(), c.bytes.size(), path);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status(), file.status());
  }
}

TEST(SafetensorsTest, ErrorOffsetsPointAtTheProblem) {
  const std::string bytes = MakeFile(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"X","shape":[0],"data_offsets":[4,4]}})",
      std::string(4, '\0'));
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(bytes.data(), bytes.size(), "f");
  ASSERT_FALSE(file.ok());
  const size_t at = bytes.find("\"X\"");
  EXPECT_NE(file.status().message().find(": offset " + std::to_string(at) + ":"), std::string::npos)
      << file.status() << " (expected offset " << at << ")";
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
}

std::string ValidSample() {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/sample.safetensors";
  const Named tensors = {{"w", Tensor::FromVector({1, 2, 3, 4}, {2, 2}, DType::kBF16)},
                         {"b", Tensor::FromVector({5, 6}, {2}, DType::kF16)},
                         {"s", Tensor::FromVector({7}, {})}};
  EXPECT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}, {"step", "3"}}).ok());
  return ReadBytes(path);
}

TEST(SafetensorsTest, EveryTruncationFails) {
  const std::string bytes = ValidSample();
  ASSERT_TRUE(ParseSafetensors(bytes.data(), bytes.size(), "full").ok());
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/t.safetensors";
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE(len);
    const std::string prefix = bytes.substr(0, len);
    absl::StatusOr<SafetensorsFile> parsed = ParseSafetensors(prefix.data(), prefix.size(), "t");
    EXPECT_FALSE(parsed.ok());
    WriteBytes(path, prefix);
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << file.status();
  }
  // So does any extra byte.
  const std::string longer = bytes + "x";
  EXPECT_FALSE(ParseSafetensors(longer.data(), longer.size(), "t").ok());
}

// A parse that succeeds on corrupted input must still be self-consistent.
void CheckConsistent(const absl::StatusOr<SafetensorsFile>& file, size_t size) {
  if (!file.ok()) {
    EXPECT_FALSE(file.status().message().empty());
    return;
  }
  uint64_t total = 0;
  for (const auto& [name, t] : file->tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape()) numel *= d;
    EXPECT_EQ(numel, t.numel());
    total += t.nbytes();
  }
  EXPECT_LE(total, size);
  EXPECT_EQ(file->names.size(), file->tensors.size());
}

TEST(SafetensorsTest, FlippedHeaderBitsNeverCrash) {
  const std::string bytes = ValidSample();
  const uint64_t header_end = 8 + Le64(bytes);
  int accepted = 0, rejected = 0;
  for (size_t i = 0; i < header_end; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string mutated = bytes;
      mutated[i] = static_cast<char>(mutated[i] ^ (1 << bit));
      absl::StatusOr<SafetensorsFile> file =
          ParseSafetensors(mutated.data(), mutated.size(), "flip");
      CheckConsistent(file, mutated.size());
      (file.ok() ? accepted : rejected)++;
    }
  }
  // Flips in names or metadata values can yield valid files; the rest must not.
  EXPECT_GT(rejected, accepted);
  // Every flip of the length field is caught.
  for (size_t i = 0; i < 8; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string mutated = bytes;
      mutated[i] = static_cast<char>(mutated[i] ^ (1 << bit));
      EXPECT_FALSE(ParseSafetensors(mutated.data(), mutated.size(), "flip").ok())
          << i << ":" << bit;
    }
  }
}

TEST(SafetensorsTest, RandomMutationsNeverCrash) {
  const std::string bytes = ValidSample();
  std::mt19937 rng(12345);
  const std::string alphabet = "{}[]\":,0123456789 -.eE\\uFBTabcdefghijklmnopqrstuvwxyz_\x00\xff";
  for (int iter = 0; iter < 20000; ++iter) {
    std::string mutated = bytes;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % mutated.size();
      switch (rng() % 4) {
        case 0:
          mutated[pos] = static_cast<char>(rng());
          break;
        case 1:
          mutated[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 2:
          mutated.erase(pos, 1 + rng() % 4);
          break;
        default:
          mutated.insert(pos, 1, alphabet[rng() % alphabet.size()]);
      }
      if (mutated.empty()) mutated = "x";
    }
    if (rng() % 2 == 0 && mutated.size() >= 8) {
      // Keep the length field consistent so the mutation reaches the parser.
      if (Le64(bytes) + mutated.size() >= bytes.size()) {
        mutated.replace(0, 8, Le64Bytes(Le64(bytes) + mutated.size() - bytes.size()));
      }
    }
    absl::StatusOr<SafetensorsFile> file = ParseSafetensors(mutated.data(), mutated.size(), "fuzz");
    CheckConsistent(file, mutated.size());
  }
  // Pure noise behind a plausible length.
  for (int iter = 0; iter < 2000; ++iter) {
    const size_t n = rng() % 200;
    std::string noise = Le64Bytes(n);
    for (size_t i = 0; i < n + rng() % 16; ++i) noise.push_back(alphabet[rng() % alphabet.size()]);
    CheckConsistent(ParseSafetensors(noise.data(), noise.size(), "noise"), noise.size());
  }
}

}  // namespace
}  // namespace ampd::engine::io
