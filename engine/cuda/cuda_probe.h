#ifndef AMPD_ENGINE_CUDA_CUDA_PROBE_H_
#define AMPD_ENGINE_CUDA_CUDA_PROBE_H_

// The smallest CUDA surface: is there a usable GPU, and can we run a kernel on
// it? Plain C++ on purpose, so callers never need CUDA's headers.

#include <string>
#include <vector>

namespace ampd::engine::cuda {

struct ProbeResult {
  int device_count = 0;
  // Why no device is usable ("built without CUDA", "CUDA driver version is
  // insufficient for CUDA runtime version", ...). Empty when device_count > 0.
  std::string reason;
};

// Never fails: "no GPU" is an ordinary answer.
ProbeResult ProbeDevices();

// y := a * x + y on device 0. Returns an empty string on success, otherwise
// the CUDA error with the call that raised it.
std::string SaxpyOnDevice(float a, const std::vector<float>& x, std::vector<float>& y);

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_CUDA_PROBE_H_
