#ifndef AMPD_BENCH_KERNEL_PROFILE_H_
#define AMPD_BENCH_KERNEL_PROFILE_H_

// A training step's time by kernel, for benchmarks' --profile: every kernel
// of one device's registry is wrapped (backend::WrapKernels), and while
// profiling each call is timed, minus the kernels it calls in turn (a
// stack), and summed by kernel and by its arguments' dtypes and shapes.
// On a GPU, `sync` waits for the device before and after each kernel, so a
// kernel's time is its launch and its device work. What is left of the step
// is "(outside kernels)": work that is not a registry kernel (the device AMP
// calls: unscale, clipping's norm, the optimizer) and host work.

#include <functional>

#include "engine/core/tensor.h"

namespace ampd::bench {

// Wraps `device`'s kernels once per process (sync may be null: the CPU).
void InstallKernelProfile(engine::core::Device device, void (*sync)());

// Runs step() `steps` times with every kernel timed, then prints the table:
// ms per step by kernel, then the costliest calls by arguments, headed by
// "profile of <what>". Also prints "PROFILE kernel=... calls=... ms=..."
// lines for scripts.
void ProfileSteps(const char* what, int64_t steps, const std::function<void()>& step);

}  // namespace ampd::bench

#endif  // AMPD_BENCH_KERNEL_PROFILE_H_
