#include "bench/torch_step.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ampd::bench {

double TorchStepMs(const std::string& python, const std::string& script, const std::string& args,
                   const std::string& result) {
  // `bazel run` starts in the runfiles; the script is read from the source tree.
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string path = absl::StrCat(workspace != nullptr ? workspace : ".", "/bench/", script);
  const std::string cmd =
      // PyTorch's process keeps its freed memory mapped too, as ampd's does
      // (engine/cpu/host_memory.h), so the comparison is of the steps alone.
      absl::StrCat("MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 ", python, " ", path, " ",
                   args, " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  const std::string format = absl::StrCat("RESULT ", result, " step_ms=%lf");
  char line[512];
  double ms = -1;
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::sscanf(line, format.c_str(), &ms);
  }
  pclose(p);
  return ms;
}

}  // namespace ampd::bench
