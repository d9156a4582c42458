// Fallback for builds without CUDA (--config=cpu, or no toolkit installed).
#include "engine/cuda/cuda_probe.h"

namespace ampd::engine::cuda {

ProbeResult ProbeDevices() {
  ProbeResult result;
  result.reason = "ampd was built without CUDA (--config=cpu or no CUDA toolkit at build time)";
  return result;
}

std::string SaxpyOnDevice(float, const std::vector<float>&, std::vector<float>&) {
  return "ampd was built without CUDA";
}

}  // namespace ampd::engine::cuda
