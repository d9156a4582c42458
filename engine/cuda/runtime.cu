#include <cuda_runtime.h>

#include <string>

#include "engine/cuda/runtime.h"

namespace ampd::engine::cuda {
namespace {

std::string Err(const std::string& call, cudaError_t err) {
  if (err == cudaSuccess) return "";
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  return call + ": " + cudaGetErrorString(err);
}

cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }

}  // namespace

std::string DeviceCount(int* count) {
  *count = 0;
  return Err("cudaGetDeviceCount", cudaGetDeviceCount(count));
}

std::string GetDeviceProperties(int device, DeviceProperties* out) {
  cudaDeviceProp prop;
  std::string e = Err("cudaGetDeviceProperties(" + std::to_string(device) + ")",
                      cudaGetDeviceProperties(&prop, device));
  if (!e.empty()) return e;
  out->index = device;
  out->name = prop.name;
  out->major = prop.major;
  out->minor = prop.minor;
  out->total_memory = static_cast<int64_t>(prop.totalGlobalMem);
  out->multiprocessors = prop.multiProcessorCount;
  return "";
}

std::string SetDevice(int device) {
  return Err("cudaSetDevice(" + std::to_string(device) + ")", cudaSetDevice(device));
}

std::string Malloc(void** p, size_t bytes) {
  return Err("cudaMalloc(" + std::to_string(bytes) + " bytes)", cudaMalloc(p, bytes));
}

std::string Free(void* p) { return Err("cudaFree", cudaFree(p)); }

std::string MallocHost(void** p, size_t bytes) {
  return Err("cudaMallocHost(" + std::to_string(bytes) + " bytes)", cudaMallocHost(p, bytes));
}

std::string FreeHost(void* p) { return Err("cudaFreeHost", cudaFreeHost(p)); }

std::string EventCreate(Event* e) {
  cudaEvent_t event = nullptr;
  std::string err =
      Err("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  *e = event;
  return err;
}

std::string EventRecord(Event e, Stream s) {
  return Err("cudaEventRecord", cudaEventRecord(static_cast<cudaEvent_t>(e), S(s)));
}

std::string EventSynchronize(Event e) {
  return Err("cudaEventSynchronize", cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
}

std::string EventCreateTimed(Event* e) {
  cudaEvent_t event = nullptr;
  std::string err =
      Err("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&event, cudaEventDefault));
  *e = event;
  return err;
}

std::string EventElapsedMs(Event start, Event end, float* ms) {
  return Err("cudaEventElapsedTime", cudaEventElapsedTime(ms, static_cast<cudaEvent_t>(start),
                                                          static_cast<cudaEvent_t>(end)));
}

std::string StreamWaitEvent(Stream s, Event e) {
  return Err("cudaStreamWaitEvent", cudaStreamWaitEvent(S(s), static_cast<cudaEvent_t>(e), 0));
}

std::string StreamCreate(Stream* s) {
  cudaStream_t stream = nullptr;
  std::string e =
      Err("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  *s = stream;
  return e;
}

std::string StreamSynchronize(Stream s) {
  return Err("cudaStreamSynchronize", cudaStreamSynchronize(S(s)));
}

std::string MemcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s) {
  cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                       : cudaMemcpyDeviceToDevice;
  return Err("cudaMemcpyAsync(" + std::to_string(bytes) + " bytes)",
             cudaMemcpyAsync(dst, src, bytes, k, S(s)));
}

std::string MemsetAsync(void* p, int value, size_t bytes, Stream s) {
  return Err("cudaMemsetAsync", cudaMemsetAsync(p, value, bytes, S(s)));
}

std::string MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return Err("cudaMemGetInfo", cudaMemGetInfo(free_bytes, total_bytes));
}

}  // namespace ampd::engine::cuda
