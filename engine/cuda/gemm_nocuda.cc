// Builds without CUDA: the GEMM runner exists (tests and the GPU benchmark
// link it) but only reports why it cannot run; the flash attention kernels'
// choice (kernels.h) is kept, with no kernel to take it.
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"

namespace ampd::engine::cuda {

struct GemmRunner::State {};

GemmRunner& GemmRunner::ForThisThread() {
  static thread_local GemmRunner runner;
  return runner;
}

GemmRunner::GemmRunner() : state_(new State) {}
GemmRunner::~GemmRunner() { delete state_; }

std::string GemmRunner::Run(const GemmArgs&, void*) { return "ampd was built without CUDA"; }

bool GemmRunner::HasAlgorithm(const GemmArgs&) { return false; }

std::string GemmRunner::FindPlan(const GemmArgs&, void**) { return "ampd was built without CUDA"; }

int GemmRunner::cached_plans() const { return 0; }

namespace {
FlashKernels g_flash_kernels = FlashKernels::kWmma;
}  // namespace

void SetFlashKernels(FlashKernels kernels) { g_flash_kernels = kernels; }
FlashKernels GetFlashKernels() { return g_flash_kernels; }

}  // namespace ampd::engine::cuda
