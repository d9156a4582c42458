#ifndef AMPD_ENGINE_CUDA_RUNTIME_H_
#define AMPD_ENGINE_CUDA_RUNTIME_H_

// The CUDA runtime calls the backend makes, behind plain C++ (runtime.cu), so
// nothing outside the .cu files needs CUDA's headers. Each returns "" on
// success, otherwise "<call>(<args>): <CUDA error string>".

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampd::engine::cuda {

using Stream = void*;  // cudaStream_t

struct DeviceProperties {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int64_t total_memory = 0;
  int multiprocessors = 0;
};

// "No device" is an ordinary answer: count 0 and the reason in the result.
std::string DeviceCount(int* count);
std::string GetDeviceProperties(int device, DeviceProperties* out);
std::string SetDevice(int device);
std::string Malloc(void** p, size_t bytes);
std::string Free(void* p);
// Page-locked host memory: device-to-host copies into it are truly async.
std::string MallocHost(void** p, size_t bytes);
std::string FreeHost(void* p);
using Event = void*;                // cudaEvent_t
std::string EventCreate(Event* e);  // timing disabled: cheap to record
std::string EventRecord(Event e, Stream s);
std::string EventSynchronize(Event e);
// An event that also records when it was reached (cudaEventElapsedTime),
// for the device time of overlapped work.
std::string EventCreateTimed(Event* e);
// end - start in ms; both reached (a host wait covered them).
std::string EventElapsedMs(Event start, Event end, float* ms);
// Work queued on s after this waits, on the device, for e's latest record
// (possibly on another stream).
std::string StreamWaitEvent(Stream s, Event e);
std::string StreamCreate(Stream* s);
std::string StreamSynchronize(Stream s);
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
std::string MemcpyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, Stream s);
std::string MemsetAsync(void* p, int value, size_t bytes, Stream s);
std::string MemGetInfo(size_t* free_bytes, size_t* total_bytes);

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_RUNTIME_H_
