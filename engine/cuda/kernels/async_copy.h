#ifndef AMPD_ENGINE_CUDA_KERNELS_ASYNC_COPY_H_
#define AMPD_ENGINE_CUDA_KERNELS_ASYNC_COPY_H_

// Copies from global to shared memory that proceed while the thread computes
// (PTX cp.async, sm_80 and later), so a kernel can stage its next tile during
// the work on the current one:
//   CopyAsync16(dst, src): 16 bytes, both addresses 16-byte aligned, dst in
//     shared memory, src in global memory;
//   CommitAsyncCopies(): closes the thread's group of copies issued since the
//     last commit (an empty group is allowed);
//   WaitAsyncCopies<N>(): waits until at most the N most recent of the
//     thread's committed groups are pending.
// A copy's bytes may land any time before the wait that covers it, and a wait
// covers only the calling thread's copies: a tile is read after the wait and
// then a __syncthreads. The CPU emulator's stand-ins (tests/engine/cuda/emu)
// copy at that wait and never earlier, so reading a tile too soon reads the
// bytes it held before; a thread that ends with copies it never waited for
// aborts there.

#include <cuda_runtime.h>

namespace ampd::engine::cuda::kernel_util {

__device__ __forceinline__ void CopyAsync16(void* dst, const void* src) {
#ifdef AMPD_CUDA_EMU
  AmpdEmuCopyAsync(dst, src, 16);
#else
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(src) : "memory");
#endif
}

__device__ __forceinline__ void CommitAsyncCopies() {
#ifdef AMPD_CUDA_EMU
  AmpdEmuCommitAsyncCopies();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void WaitAsyncCopies() {
#ifdef AMPD_CUDA_EMU
  AmpdEmuWaitAsyncCopies(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace ampd::engine::cuda::kernel_util

#endif  // AMPD_ENGINE_CUDA_KERNELS_ASYNC_COPY_H_
