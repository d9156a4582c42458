#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "engine/cuda/cuda_probe.h"

namespace ampd::engine::cuda {
namespace {

__global__ void SaxpyKernel(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

std::string Describe(const char* call, cudaError_t err) {
  return std::string(call) + ": " + cudaGetErrorString(err);
}

}  // namespace

ProbeResult ProbeDevices() {
  ProbeResult result;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    result.reason = Describe("cudaGetDeviceCount", err);
    cudaGetLastError();  // Clear the sticky error so later probes start clean.
    return result;
  }
  if (count == 0) {
    result.reason = "no CUDA device present";
    return result;
  }
  result.device_count = count;
  return result;
}

std::string SaxpyOnDevice(float a, const std::vector<float>& x, std::vector<float>& y) {
  if (x.size() != y.size()) return "SaxpyOnDevice: x and y differ in size";
  const int n = static_cast<int>(x.size());
  const size_t bytes = x.size() * sizeof(float);
  float* dx = nullptr;
  float* dy = nullptr;
  std::string error;
  cudaError_t err;
  if ((err = cudaMalloc(&dx, bytes)) != cudaSuccess) return Describe("cudaMalloc(x)", err);
  if ((err = cudaMalloc(&dy, bytes)) != cudaSuccess) {
    cudaFree(dx);
    return Describe("cudaMalloc(y)", err);
  }
  if ((err = cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
    error = Describe("cudaMemcpy(x)", err);
  } else if ((err = cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
    error = Describe("cudaMemcpy(y)", err);
  } else {
    SaxpyKernel<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
    if ((err = cudaGetLastError()) != cudaSuccess) {
      error = Describe("SaxpyKernel launch", err);
    } else if ((err = cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) {
      error = Describe("cudaMemcpy(y back)", err);
    }
  }
  cudaFree(dx);
  cudaFree(dy);
  return error;
}

}  // namespace ampd::engine::cuda
