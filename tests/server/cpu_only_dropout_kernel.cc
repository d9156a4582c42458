// Linked into a test build of ampd (ampd_emu_cpu_only_dropout): dropout also
// needs a kernel that only the CPU registers, as a new op would before its
// CUDA kernel is written. Jobs that use dropout on CUDA must then be refused
// when they are created; the same job on the CPU runs.

#include "engine/backend/kernel_registry.h"
#include "engine/backend/kernels/dropout.h"

namespace ampd::testing {
namespace {

struct DropoutWithoutCudaKernel {
  static constexpr const char* kName = "dropout_without_cuda";
  static constexpr engine::OpId kOps[] = {engine::OpId::kDropout};
  using Fn = engine::Tensor (*)(const engine::Tensor& x, double p, uint64_t seed);
};

engine::Tensor CpuDropout(const engine::Tensor& x, double p, uint64_t seed) {
  return engine::backend::Kernel<engine::backend::DropoutKernel>(engine::Device::kCpu)(x, p, seed);
}

AMPD_REGISTER_KERNEL(DropoutWithoutCudaKernel, engine::Device::kCpu, CpuDropout);

}  // namespace
}  // namespace ampd::testing
