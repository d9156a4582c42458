// Builds without CUDA (--config=cpu, or no toolkit): nothing to register.
#include "engine/cuda/cuda_backend.h"

namespace ampd::cuda {

void RegisterCudaBackend() {}

std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none) {
  if (why_none) {
    *why_none = "ampd was built without CUDA (--config=cpu or no CUDA toolkit at build time)";
  }
  return {};
}

AllocatorStats CudaMemoryStats() { return {}; }

void* CudaStreamForThisThread() { return nullptr; }

std::string SynchronizeThisThread() { return "ampd was built without CUDA"; }

}  // namespace ampd::cuda
