#ifndef AMPD_TESTS_CUDA_EMU_CUDA_RUNTIME_H_
#define AMPD_TESTS_CUDA_EMU_CUDA_RUNTIME_H_

// A CPU stand-in for the part of the CUDA runtime that engine/cuda uses, so
// that the kernels (kernels/*.cu), gemm.cu, runtime.cu and the backend can be compiled
// unchanged as C++ and run here, where there is no GPU (see README.md).
//
// It is strict where real CUDA is strict and a bug would otherwise hide:
//  - work on a stream runs only when the host synchronizes (stream, event or
//    an implicitly synchronizing call), so a host read of a pinned buffer
//    before the copy into it has run sees stale bytes, as on a GPU;
//  - copies and kernels must be given device memory from cudaMalloc (a host
//    pointer passed to a kernel is an illegal address, a sticky error);
//  - launch configurations are checked (empty grid, more than 1024 threads,
//    grid.y/z over 65535) and become cudaErrorInvalidConfiguration;
//  - __syncthreads is a real barrier for the threads of a block (each runs on
//    its own fiber), and one that not every thread of a block reaches aborts;
//  - device memory is finite (AMPD_CUDA_EMU_MEMORY_MIB, default 4096);
//  - the threads of a block can run in reverse order, to expose races.

#include <math.h>  // float overloads of exp, log, ... at global scope, as CUDA has

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#define AMPD_CUDA_EMU 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Blocks run one at a time, so one copy of a block's shared array serves all.
#define __shared__ static

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned int x, y, z;
};
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
void __syncthreads();
// A barrier for the calling thread's warp (threads t / 32 alike); the full
// mask only.
void __syncwarp(unsigned mask = 0xFFFFFFFFu);
// The butterfly shuffle: the value of lane (lane ^ lane_mask) of the caller's
// warp, every lane of it taking part (the full mask, width 32, float or
// int); two warp barriers around an exchange through a per-thread slot.
float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width = 32);
int __shfl_xor_sync(unsigned mask, int v, int lane_mask, int width = 32);
// The stand-in for PTX's mma.sync.aligned.m16n8k16.row.col.f32 with bf16 (or,
// bf16 false, f16) inputs: d += a * b over the warp's fragments in the
// instruction's documented layout (engine/cuda/kernels/mma_sync.h), every
// lane taking part; an exchange through per-thread slots between two warp
// barriers, as __shfl_xor_sync. Products are exact in f32 and summed in k
// order onto d (tensor cores sum in an order of their own).
void AmpdEmuMmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool bf16);
// The stand-in for PTX's ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16:
// lane l gives the address of row l % 8 of 8 x 8 matrix l / 8 (16 bytes of
// 16-bit values, 16-byte aligned, else it aborts); register i of lane (g, q)
// receives matrix i's row g, columns 2q and 2q + 1 (trans: rows 2q and
// 2q + 1 of column g), the first in the low half. Every lane takes part; the
// addresses are exchanged through per-thread slots between two warp barriers.
void AmpdEmuLdMatrixX4(uint32_t (&r)[4], const void* row, bool trans);
// The stand-ins for PTX's cp.async (engine/cuda/kernels/async_copy.h): a
// copy is queued in the calling thread's open group (both addresses aligned
// to its size, else it aborts); a commit closes the group; a wait performs
// the thread's queued copies of every committed group but the newest n, in
// order. Nothing is copied earlier. A thread that returns with queued copies
// aborts.
// A GPU faults on a load or store of n bytes (2, 4, 8 or 16) at an address
// that is not a multiple of n ("misaligned address", a sticky error that ends
// the context); x86 does not. The kernels' vector accesses call this first
// (kernel_util.h's CheckAligned), and it aborts with the kernel's name.
void AmpdEmuCheckAligned(const void* p, int bytes, const char* what);
// CUDA's documented requirements of every WMMA load and store (mma.h): a
// 256-bit (32-byte) aligned pointer and a leading dimension that is a
// multiple of 8 for 16-bit elements, of 4 for float. Broken, they are
// undefined behaviour on a GPU; here they abort naming the kernel.
void AmpdEmuCheckWmmaOperand(const void* p, unsigned ldm, int element_bytes, const char* what);
void AmpdEmuCopyAsync(void* dst, const void* src, int bytes);
void AmpdEmuCommitAsyncCopies();
void AmpdEmuWaitAsyncCopies(int n);

using std::max;
using std::min;

// CUDA's round-to-nearest intrinsics, which nvcc never contracts into FMAs:
// here plain IEEE operations (the host compiler emits no FMAs either).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
constexpr unsigned int cudaStreamNonBlocking = 1;
constexpr unsigned int cudaEventDefault = 0;
constexpr unsigned int cudaEventDisableTiming = 2;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t e);

// ---- what the emulator adds (not CUDA API)
namespace cudaemu {

// Runs fn in stream order: now if the stream is synchronized later, that is,
// when the host next waits on it. Used by the launches below and by the fake
// cuBLASLt.
void Enqueue(cudaStream_t s, std::function<void()> fn);
// Returns the sticky error (or success) and makes a launch-time error the
// "last error" that cudaGetLastError reports.
cudaError_t SetLaunchError(cudaError_t e, const std::string& why);
cudaError_t StickyError();
// Device memory check: [p, p + bytes) inside one cudaMalloc block.
bool IsDeviceRange(const void* p, size_t bytes);
// AMPD_CUDA_EMU_TRACE=1: every kernel and GEMM is printed as it runs.
bool Tracing();
// Runs kernel(grid, block) on the CPU, a block at a time.
void RunGrid(const char* name, dim3 grid, dim3 block, const std::function<void()>& thread_body);
// The order in which a block's threads run between two barriers. A thread
// that reads what another writes in the same interval (a race on a GPU) sees
// the write in one order and not in the other, so a suite that passes in
// both has no such race that changes its results. The default comes from
// AMPD_CUDA_EMU_THREAD_ORDER ("reverse"; otherwise ascending).
void SetReverseThreadOrder(bool reverse);
// Counts for tests of the emulator itself.
struct Counters {
  int64_t launches = 0, fiber_blocks = 0, direct_blocks = 0, barriers = 0;
  // Calls that make the host wait for the device: stream synchronizes, event
  // synchronizes on an event not yet reached, copies into pageable memory,
  // and the implicit device synchronization of cudaFree / cudaFreeHost.
  int64_t host_waits = 0;
  // Launches by kernel name as the LAUNCH site spells it
  // ("AdamW8bitStepListKernel", "AdamWStepKernel<kVec>").
  std::map<std::string, int64_t> launches_of;
};
Counters GetCounters();

// A kernel argument that is a pointer must be null or device memory;
// overloads (found by argument-dependent lookup) check structs of pointers.
template <typename T>
bool ArgIsValid(const T& arg) {
  if constexpr (std::is_pointer_v<T>) {
    return arg == nullptr || IsDeviceRange(arg, 1);
  } else {
    return true;
  }
}

// A typed pointer argument must be aligned to its type: the kernel's accesses
// through it would fault on a GPU (a sticky "misaligned address").
template <typename T>
bool ArgIsAligned(const T& arg) {
  if constexpr (std::is_pointer_v<T>) {
    using Pointee = std::remove_cv_t<std::remove_pointer_t<T>>;
    if constexpr (!std::is_void_v<Pointee>) {
      return reinterpret_cast<uintptr_t>(arg) % alignof(Pointee) == 0;
    }
  }
  return true;
}

template <typename... P>
class Launcher {
 public:
  Launcher(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream, const char* name)
      : kernel_(kernel), grid_(grid), block_(block), stream_(stream), name_(name) {}

  template <typename... A>
  void operator()(A&&... args) const {
    // Arguments are converted to the parameter types and copied now, as a
    // real launch does.
    std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    if (StickyError() != cudaSuccess) return;
    if (grid_.x == 0 || grid_.y == 0 || grid_.z == 0 || block_.x == 0 || block_.y == 0 ||
        block_.z == 0 || static_cast<uint64_t>(block_.x) * block_.y * block_.z > 1024 ||
        grid_.y > 65535 || grid_.z > 65535 || grid_.x > 2147483647u) {
      SetLaunchError(cudaErrorInvalidConfiguration,
                     std::string(name_) + ": invalid launch configuration");
      return;
    }
    const bool valid = std::apply([](const auto&... p) { return (ArgIsValid(p) && ...); }, params);
    if (!valid) {
      SetLaunchError(cudaErrorIllegalAddress,
                     std::string(name_) + ": a pointer argument is not device memory");
      return;
    }
    const bool aligned =
        std::apply([](const auto&... p) { return (ArgIsAligned(p) && ...); }, params);
    if (!aligned) {
      SetLaunchError(cudaErrorMisalignedAddress,
                     std::string(name_) + ": a pointer argument is not aligned to its type");
      return;
    }
    auto kernel = kernel_;
    const char* name = name_;
    const dim3 grid = grid_, block = block_;
    Enqueue(stream_, [kernel, params, name, grid, block] {
      RunGrid(name, grid, block, [&] { std::apply(kernel, params); });
    });
  }

 private:
  void (*kernel_)(P...);
  dim3 grid_, block_;
  cudaStream_t stream_;
  const char* name_;
};

template <typename... P>
Launcher<P...> MakeLauncher(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream,
                            const char* name) {
  return Launcher<P...>(kernel, grid, block, stream, name);
}

}  // namespace cudaemu

#define AMPD_EMU_LAUNCH(kernel, grid, block, stream) \
  ::cudaemu::MakeLauncher(kernel, grid, block, stream, #kernel)

#include "cuda_bf16.h"
#include "cuda_fp16.h"

#endif  // AMPD_TESTS_CUDA_EMU_CUDA_RUNTIME_H_
