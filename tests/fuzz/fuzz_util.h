// Helpers shared by the libFuzzer targets: the readers under test take file
// paths, so each input is written to a per-process scratch directory.
#ifndef AMPD_TESTS_FUZZ_FUZZ_UTIL_H_
#define AMPD_TESTS_FUZZ_FUZZ_UTIL_H_

#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ampd::fuzz {

inline std::string& ScratchDirStorage() {
  static std::string dir;
  return dir;
}

// Removes the scratch directory and the few files in it (at a normal exit; a
// crashing run leaves it for inspection).
inline void RemoveScratchDir() {
  const std::string& dir = ScratchDirStorage();
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// A directory made once per process; WriteFile overwrites its files in place.
inline const std::string& ScratchDir() {
  static const bool made = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/ampd-fuzz-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) std::abort();
    ScratchDirStorage() = templ;
    std::atexit(RemoveScratchDir);
    return true;
  }();
  (void)made;
  return ScratchDirStorage();
}

inline std::string WriteFile(const std::string& name, const uint8_t* data, size_t size) {
  std::string path = ScratchDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace ampd::fuzz

#endif  // AMPD_TESTS_FUZZ_FUZZ_UTIL_H_
