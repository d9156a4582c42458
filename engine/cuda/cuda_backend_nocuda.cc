// Builds without CUDA (--config=cpu, or no toolkit): no backend registers.
#include "engine/cuda/cuda_backend.h"

namespace ampd::engine::cuda {

std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none) {
  if (why_none) {
    *why_none = "ampd was built without CUDA (--config=cpu or no CUDA toolkit at build time)";
  }
  return {};
}

AllocatorStats CudaMemoryStats() { return {}; }

void* CudaStreamForThisThread() { return nullptr; }

std::string SynchronizeThisThread() { return "ampd was built without CUDA"; }

}  // namespace ampd::engine::cuda
