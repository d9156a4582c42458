#ifndef AMPD_TESTS_ENGINE_IO_IO_TEST_UTIL_H_
#define AMPD_TESTS_ENGINE_IO_IO_TEST_UTIL_H_

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::engine::io::testing {

// A fresh directory under the test's temporary directory.
inline std::string MakeTempDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(root != nullptr ? root : "/tmp") + "/io_test.XXXXXX";
  char* dir = ::mkdtemp(tmpl.data());
  EXPECT_NE(dir, nullptr) << tmpl;
  return tmpl;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The names in `dir`, sorted.
inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ampd::engine::io::testing

#endif  // AMPD_TESTS_ENGINE_IO_IO_TEST_UTIL_H_
