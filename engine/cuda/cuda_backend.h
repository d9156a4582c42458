#ifndef AMPD_ENGINE_CUDA_CUDA_BACKEND_H_
#define AMPD_ENGINE_CUDA_CUDA_BACKEND_H_

// The CUDA backend: every engine op on an NVIDIA GPU behind engine::backend::Backend
// (cuBLASLt GEMMs, the kernels of kernels/*.cu, device-side AMP). Plain C++;
// built from a fallback that registers nothing when CUDA is disabled.
//
// Device memory comes from a caching allocator; each thread that runs device
// work (a job's worker) gets its own stream, scratch buffers and pinned
// staging memory. Kernels cannot return errors through Tensor results, so the
// first CUDA/cuBLAS failure on a thread is kept (with the call) and reported
// by Backend::Health(); the thread's later device work is skipped until the
// next job on it calls Ready(). Only device 0 is used.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/cuda/caching_allocator.h"

namespace ampd::engine::cuda {

// Linking this target registers the backend for engine::Device::kCuda (see
// engine/backend/backend.h); there is nothing to call.

// One GPU: name, compute capability, memory, SMs and its bf16/f16/FP8 units.
using CudaDeviceInfo = engine::backend::DeviceProperties;

// Empty with *why_none set when no device is usable.
std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none);

// The data sheet's dense bf16 rate for a GPU by its name ("NVIDIA H200"),
// 0 for GPUs not in the table.
double DataSheetBf16Flops(const std::string& name);

// The device allocator's counters (zeros when no device was used).
AllocatorStats CudaMemoryStats();

// The calling thread's stream (a cudaStream_t; null without CUDA), for tests
// and benchmarks that launch cuBLASLt directly on backend tensors.
void* CudaStreamForThisThread();
// Waits for the calling thread's device work ("" or the CUDA error).
std::string SynchronizeThisThread();

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_CUDA_BACKEND_H_
