// Builds without CUDA: the GEMM runner exists (tests and the GPU benchmark
// link it) but only reports why it cannot run.
#include "engine/cuda/gemm.h"

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

}  // namespace ampd::engine::cuda
