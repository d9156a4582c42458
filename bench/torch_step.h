#ifndef AMPD_BENCH_TORCH_STEP_H_
#define AMPD_BENCH_TORCH_STEP_H_

// The PyTorch side of a benchmark's comparison: runs one of bench/'s
// torch_*_bench.py scripts in `python` and reads the step time it prints.

#include <string>

namespace ampd::bench {

// Runs `python bench/<script> <args>` (the script read from the source tree
// under `bazel run`, else from the current directory) and returns the
// `step_ms=` of its "RESULT <result> step_ms=..." line, or -1 when there is
// none (torch not importable, the script failed).
double TorchStepMs(const std::string& python, const std::string& script, const std::string& args,
                   const std::string& result);

}  // namespace ampd::bench

#endif  // AMPD_BENCH_TORCH_STEP_H_
