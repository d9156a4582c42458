// The CPU emulator's own guarantees, each of which would let a real GPU bug
// through if it did not hold: barriers are real, stream work waits for the
// host to synchronize, bad launches and host pointers are errors, a barrier
// that not every thread reaches aborts, memory is finite, and the fake
// cuBLASLt and cuDNN refuse what the real ones refuse.

#include <cuda_runtime.h>
#include <cudnn.h>
#include <mma.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/fp8.h"
#include "engine/cuda/conv.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels/async_copy.h"
#include "engine/cuda/kernels/kernel_util.h"
#include "engine/cuda/kernels/mma_sync.h"
#include "gtest/gtest.h"

namespace {

constexpr int kThreads = 256;

// Each thread reads its neighbour's slot after the barrier: run one thread
// after another without a real barrier and thread 0 would read a slot that
// thread 1 has not written yet.
__global__ void RotateThroughShared(int* out) {
  __shared__ int slots[kThreads];
  slots[threadIdx.x] = static_cast<int>(threadIdx.x) * 10 + static_cast<int>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

// Racy: reads the slot the thread below writes, with no barrier in between.
__global__ void ReadBelowWithoutBarrier(int base, int* out) {
  __shared__ int slots[kThreads];
  slots[threadIdx.x] = base + static_cast<int>(threadIdx.x);
  if (threadIdx.x > 0) out[threadIdx.x] = slots[threadIdx.x - 1];
}

// Racy across blocks: block b reads the value block b - 1 writes in the same
// launch, which a GPU may run later or at the same time.
__global__ void ReadTheBlockBelow(int base, int* out) {
  if (threadIdx.x != 0) return;
  out[blockIdx.x] = base + static_cast<int>(blockIdx.x);
  if (blockIdx.x > 0) out[gridDim.x + blockIdx.x] = out[blockIdx.x - 1];
}

// Each warp's last thread writes a slot its warp's first thread reads after
// __syncwarp: in ascending order the reader runs first, so without a real
// warp barrier it would read what the previous launch left. Warp 1 never
// waits for warp 0 at __syncwarp (it has no __syncthreads to wait at).
__global__ void PassWithinTheWarp(int base, int* out) {
  __shared__ int slots[64 / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 31) slots[warp] = base + warp;
  __syncwarp();
  if (lane == 0) out[warp] = slots[warp];
}

// A butterfly sum over each warp of 64 threads, and each lane's partner
// across lane mask 5: out[t] = (the sum of its warp's values, partner's value).
__global__ void ButterflySums(const float* in, float* sum, int* partner) {
  float v = in[threadIdx.x];
  partner[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x), 5);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  sum[threadIdx.x] = v;
}

// Half of a warp waits at __syncwarp, the other half leaves.
__global__ void HalfAWarpLeaves(int* out) {
  if (threadIdx.x % 32 >= 16) return;
  __syncwarp();
  out[threadIdx.x] = 1;
}

// D = A B + C for one 16 x 16 x 16 tile, the way a kernel uses WMMA: A from
// shared memory row-major, B column-major (so B^T is stored), C loaded from
// and D stored to the same place by the whole warp.
__global__ void OneTile(const __half* a, const __half* bt, float* cd) {
  namespace wmma = nvcuda::wmma;
  alignas(32) __shared__ __half sa[256], sbt[256];
  alignas(32) __shared__ float scd[256];
  for (int e = threadIdx.x; e < 256; e += 32) {
    sa[e] = a[e];
    sbt[e] = bt[e];
    scd[e] = cd[e];
  }
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, sa, 16);
  wmma::load_matrix_sync(fb, sbt, 16);
  wmma::load_matrix_sync(acc, scd, 16, wmma::mem_row_major);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(scd, acc, 16, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < 256; e += 32) cd[e] = scd[e];
}

// D = A B + C for one m16n8k16 product through mma.sync (MmaM16N8K16), each
// lane building its fragments value by value from the PTX ISA's table for
// m16n8k16 (f16/bf16 A and B, f32 C and D), written here in the table's own
// terms (element i of a lane's fragment, the lower-numbered element in the
// low half of each register): a[16][16], b[16][8], cd[16][8] row-major.
template <typename T>
__global__ void OneMmaSync(const T* a, const T* b, float* cd) {
  const int lane = threadIdx.x, g = lane >> 2, q = lane % 4;
  uint16_t av[8], bv[4];
  for (int i = 0; i < 8; ++i) {
    const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
    const int col = q * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    std::memcpy(&av[i], &a[row * 16 + col], 2);
  }
  for (int i = 0; i < 4; ++i) {
    const int row = q * 2 + (i & 1) + (i >= 2 ? 8 : 0);
    std::memcpy(&bv[i], &b[row * 8 + g], 2);
  }
  uint32_t ar[4], br[2];
  for (int j = 0; j < 4; ++j) ar[j] = av[2 * j] | (static_cast<uint32_t>(av[2 * j + 1]) << 16);
  for (int j = 0; j < 2; ++j) br[j] = bv[2 * j] | (static_cast<uint32_t>(bv[2 * j + 1]) << 16);
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = cd[(g + (i < 2 ? 0 : 8)) * 8 + q * 2 + (i & 1)];
  ampd::engine::cuda::kernel_util::MmaM16N8K16<T>(d, ar, br);
  for (int i = 0; i < 4; ++i) cd[(g + (i < 2 ? 0 : 8)) * 8 + q * 2 + (i & 1)] = d[i];
}

// One ldmatrix.x4 (LdMatrixX4) over a 16 x 16 tile of 16-bit values staged in
// shared memory with padded rows: matrix i is the tile's quarter at rows
// 8 (i % 2), columns 8 (i / 2), so lane l gives row l % 8 of quarter l / 8.
// out[lane * 4 + i] is the lane's register i.
template <bool kTrans>
__global__ void OneLdMatrix(const uint16_t* tile, uint32_t* out) {
  alignas(16) __shared__ uint16_t staged[16][24];
  for (int e = threadIdx.x; e < 256; e += 32) staged[e / 16][e % 16] = tile[e];
  __syncwarp();
  const int l = threadIdx.x;
  uint32_t r[4];
  ampd::engine::cuda::kernel_util::LdMatrixX4<kTrans>(
      r, &staged[8 * (l / 8 % 2) + l % 8][8 * (l / 16)]);
  for (int i = 0; i < 4; ++i) out[l * 4 + i] = r[i];
}

// Reads row 4 of quarter 0 from an address 8 bytes into the row.
__global__ void MisalignedLdMatrix(uint32_t* out) {
  alignas(16) __shared__ uint16_t staged[16][24];
  for (int e = threadIdx.x; e < 16 * 24; e += 32) staged[e / 24][e % 24] = 0;
  __syncwarp();
  const int l = threadIdx.x;
  uint32_t r[4];
  ampd::engine::cuda::kernel_util::LdMatrixX4<false>(
      r, &staged[8 * (l / 8 % 2) + l % 8][8 * (l / 16) + (l == 4 ? 4 : 0)]);
  out[l] = r[0];
}

// Two groups of cp.async copies into a shared tile that held 7s: group 0
// fills words [0, 128), group 1 words [128, 256). Each thread records what it
// sees of the tile before any wait, after WaitAsyncCopies<1> (group 0 only)
// and after WaitAsyncCopies<0>, each time after a __syncthreads.
__global__ void CopyInTwoGroups(const int* src, int* seen) {
  alignas(16) __shared__ int tile[256];
  namespace ku = ampd::engine::cuda::kernel_util;
  for (int e = threadIdx.x; e < 256; e += 32) tile[e] = 7;
  __syncthreads();
  ku::CopyAsync16(&tile[threadIdx.x * 4], &src[threadIdx.x * 4]);
  ku::CommitAsyncCopies();
  ku::CopyAsync16(&tile[128 + threadIdx.x * 4], &src[128 + threadIdx.x * 4]);
  ku::CommitAsyncCopies();
  __syncthreads();
  seen[threadIdx.x] = tile[(threadIdx.x * 8) % 256];
  __syncthreads();  // every thread has read before any waits
  ku::WaitAsyncCopies<1>();
  __syncthreads();
  seen[32 + threadIdx.x] = tile[(threadIdx.x * 8) % 256];
  __syncthreads();
  ku::WaitAsyncCopies<0>();
  __syncthreads();
  seen[64 + threadIdx.x] = tile[(threadIdx.x * 8) % 256];
}

// Thread 3 returns with a copy it never waited for.
__global__ void ForgetsToWait(const int* src, int* out) {
  alignas(16) __shared__ int tile[128];
  namespace ku = ampd::engine::cuda::kernel_util;
  ku::CopyAsync16(&tile[threadIdx.x * 4], &src[threadIdx.x * 4]);
  ku::CommitAsyncCopies();
  if (threadIdx.x != 3) ku::WaitAsyncCopies<0>();
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x * 4];
}

__global__ void WriteIndex(int* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x * blockDim.x + threadIdx.x;
}

// A WMMA load from `offset` values into a 32-byte aligned tile, with leading
// dimension ldm: CUDA documents both a 256-bit aligned pointer and an ldm that
// is a multiple of 8 (16-bit elements) as required.
__global__ void WmmaLoadAt(int offset, unsigned ldm) {
  namespace wmma = nvcuda::wmma;
  alignas(32) __shared__ __half tile[32 * 32];
  for (int e = threadIdx.x; e < 32 * 32; e += 32) tile[e] = __float2half_rn(0.0f);
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, tile + offset, ldm);
}

// Eight f32 values through the kernels' 16-byte vector access, from wherever
// `in` points: a GPU faults unless it is 16-byte aligned.
__global__ void CopyEightAsVectors(const void* in, float* out) {
  namespace ku = ampd::engine::cuda::kernel_util;
  float v[ku::kVec];
  ku::LoadN<ku::kVec>(in, ku::kF32, 0, v);
  ku::StoreN<ku::kVec>(out, ku::kF32, 0, v);
}

__global__ void ThreadZeroLeavesEarly(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

template <typename T>
T* DeviceAlloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

cudaStream_t NewStream() {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  return s;
}

TEST(CudaEmuTest, SyncthreadsIsABarrierForTheWholeBlock) {
  cudaStream_t s = NewStream();
  int* out = DeviceAlloc<int>(2 * kThreads);
  AMPD_EMU_LAUNCH(RotateThroughShared, 2, kThreads, s)(out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> host(2 * kThreads);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), out, host.size() * sizeof(int), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_EQ(host[b * kThreads + t], ((t + 1) % kThreads) * 10 + b) << b << " " << t;
    }
  }
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

// The race above reads the fresh value in ascending order only; in reverse
// order it reads what the previous launch left. Running the suite in both
// orders (cuda_backend_emu_reverse_test) exposes such races.
TEST(CudaEmuTest, ReverseThreadOrderExposesAMissingBarrier) {
  cudaStream_t s = NewStream();
  int* out = DeviceAlloc<int>(kThreads);
  std::vector<int> host(kThreads);
  int base = 1000;
  for (const bool reverse : {false, true}) {
    base += 1000;  // each launch writes values the last one did not
    cudaemu::SetReverseThreadOrder(reverse);
    AMPD_EMU_LAUNCH(ReadBelowWithoutBarrier, 1, kThreads, s)(base, out);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), out, kThreads * sizeof(int), cudaMemcpyDeviceToHost, s),
              cudaSuccess);
    int fresh = 0;
    for (int t = 1; t < kThreads; ++t) fresh += host[t] == base + t - 1;
    EXPECT_EQ(fresh, reverse ? 0 : kThreads - 1) << (reverse ? "reverse" : "ascending");
  }
  cudaemu::SetReverseThreadOrder(false);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(CudaEmuTest, ReverseOrderRunsTheBlocksBackwardsToo) {
  constexpr int kBlocks = 16;
  cudaStream_t s = NewStream();
  int* out = DeviceAlloc<int>(2 * kBlocks);
  std::vector<int> host(2 * kBlocks);
  int base = 1000;
  for (const bool reverse : {false, true}) {
    base += 1000;
    cudaemu::SetReverseThreadOrder(reverse);
    AMPD_EMU_LAUNCH(ReadTheBlockBelow, kBlocks, 32, s)(base, out);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), out, host.size() * sizeof(int), cudaMemcpyDeviceToHost,
                              s),
              cudaSuccess);
    int fresh = 0;
    for (int b = 1; b < kBlocks; ++b) fresh += host[kBlocks + b] == base + b - 1;
    EXPECT_EQ(fresh, reverse ? 0 : kBlocks - 1) << (reverse ? "reverse" : "ascending");
  }
  cudaemu::SetReverseThreadOrder(false);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(CudaEmuTest, KernelsWithoutBarriersRunAfterTheFirstBlockAsPlainCalls) {
  cudaStream_t s = NewStream();
  int* out = DeviceAlloc<int>(4 * 64);
  const cudaemu::Counters before = cudaemu::GetCounters();
  AMPD_EMU_LAUNCH(WriteIndex, 4, 64, s)(out);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const cudaemu::Counters after = cudaemu::GetCounters();
  EXPECT_EQ(after.fiber_blocks - before.fiber_blocks, 1);
  EXPECT_EQ(after.direct_blocks - before.direct_blocks, 3);
  std::vector<int> host(4 * 64);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), out, host.size() * sizeof(int), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  for (int i = 0; i < 4 * 64; ++i) ASSERT_EQ(host[i], i);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(CudaEmuTest, StreamWorkRunsOnlyWhenTheHostWaits) {
  cudaStream_t s = NewStream();
  int* dev = DeviceAlloc<int>(1);
  void* pinned_in = nullptr;
  void* pinned_out = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned_in, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned_out, sizeof(int)), cudaSuccess);
  *static_cast<int*>(pinned_in) = 7;
  *static_cast<int*>(pinned_out) = -1;
  ASSERT_EQ(cudaMemcpyAsync(dev, pinned_in, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  // A pinned source is read when the copy runs: overwriting it before the
  // host waits changes what arrives (the hazard the backend's staging ring
  // guards against with events).
  *static_cast<int*>(pinned_in) = 8;
  ASSERT_EQ(cudaMemcpyAsync(pinned_out, dev, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(*static_cast<int*>(pinned_out), -1) << "read before the host waited";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*static_cast<int*>(pinned_out), 8);

  // A pageable source is staged at the call.
  int pageable = 11;
  ASSERT_EQ(cudaMemcpyAsync(dev, &pageable, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  pageable = 12;
  int back = 0;  // pageable destination: the call returns with the bytes
  ASSERT_EQ(cudaMemcpyAsync(&back, dev, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(back, 11);
  EXPECT_EQ(cudaFreeHost(pinned_in), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned_out), cudaSuccess);
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST(CudaEmuTest, EventSynchronizeRunsTheStreamUpToTheEventOnly) {
  cudaStream_t s = NewStream();
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  int* dev = DeviceAlloc<int>(2);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 2 * sizeof(int)), cudaSuccess);
  int* h = static_cast<int*>(pinned);
  h[0] = h[1] = 0;
  ASSERT_EQ(cudaMemsetAsync(dev, 1, 2 * sizeof(int), s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h, dev, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h + 1, dev + 1, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(h[0], 0x01010101);
  EXPECT_EQ(h[1], 0) << "work after the event ran early";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(h[1], 0x01010101);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST(CudaEmuTest, AnEmptyGridIsAnInvalidConfigurationThatDoesNotStick) {
  cudaStream_t s = NewStream();
  int* out = DeviceAlloc<int>(1);
  AMPD_EMU_LAUNCH(WriteIndex, 0, 64, s)(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  AMPD_EMU_LAUNCH(WriteIndex, 1, 2048, s)(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

TEST(CudaEmuTest, DeviceMemoryIsFinite) {
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_before - free_after, size_t{1} << 20);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(CudaEmuDeathTest, AHostPointerPassedToAKernelIsAStickyIllegalAddress) {
  EXPECT_EXIT(
      {
        cudaStream_t s = NewStream();
        std::vector<int> host(64);
        AMPD_EMU_LAUNCH(WriteIndex, 1, 64, s)(host.data());
        void* p = nullptr;
        const bool sticky = cudaGetLastError() == cudaErrorIllegalAddress &&
                            cudaMalloc(&p, 16) == cudaErrorIllegalAddress &&
                            cudaStreamSynchronize(s) == cudaErrorIllegalAddress;
        std::exit(sticky ? 42 : 1);
      },
      ::testing::ExitedWithCode(42), "a pointer argument is not device memory");
}

// A typed pointer off its type's alignment (here an int* one byte into an
// allocation) would fault at the kernel's first access on a GPU.
TEST(CudaEmuDeathTest, AMisalignedPointerArgumentIsAStickyMisalignedAddress) {
  EXPECT_EXIT(
      {
        cudaStream_t s = NewStream();
        char* bytes = DeviceAlloc<char>(4 * 65);
        AMPD_EMU_LAUNCH(WriteIndex, 1, 64, s)(reinterpret_cast<int*>(bytes + 1));
        void* p = nullptr;
        const bool sticky = cudaGetLastError() == cudaErrorMisalignedAddress &&
                            cudaMalloc(&p, 16) == cudaErrorMisalignedAddress &&
                            cudaStreamSynchronize(s) == cudaErrorMisalignedAddress;
        std::exit(sticky ? 42 : 1);
      },
      ::testing::ExitedWithCode(42), "a pointer argument is not aligned to its type");
}

// The kernels' vector loads and stores (kernel_util.h's LoadN/StoreN) check
// their addresses: aligned they copy, 4 bytes off they abort.
TEST(CudaEmuTest, AnAlignedVectorAccessCopies) {
  cudaStream_t s = NewStream();
  float* in = DeviceAlloc<float>(16);
  float* out = DeviceAlloc<float>(8);
  const std::vector<float> host = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  ASSERT_EQ(cudaMemcpyAsync(in, host.data(), 64, cudaMemcpyHostToDevice, s), cudaSuccess);
  AMPD_EMU_LAUNCH(CopyEightAsVectors, 1, 1, s)(in + 4, out);
  std::vector<float> got(8);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), out, 32, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(got, std::vector<float>(host.begin() + 4, host.begin() + 12));
}

TEST(CudaEmuDeathTest, AMisalignedVectorAccessAborts) {
  EXPECT_DEATH(
      {
        cudaStream_t s = NewStream();
        float* in = DeviceAlloc<float>(16);
        float* out = DeviceAlloc<float>(8);
        AMPD_EMU_LAUNCH(CopyEightAsVectors, 1, 1, s)(in + 1, out);
        cudaStreamSynchronize(s);
      },
      "CopyEightAsVectors.*misaligned address: vector load of 16 bytes");
}

TEST(CudaEmuDeathTest, AWmmaOperandOffItsAlignmentOrLeadingDimensionAborts) {
  cudaStream_t s = NewStream();
  AMPD_EMU_LAUNCH(WmmaLoadAt, 1, 32, s)(16, 16u);  // 32 bytes in: allowed
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_DEATH(
      {
        AMPD_EMU_LAUNCH(WmmaLoadAt, 1, 32, s)(4, 16u);  // 8 bytes in
        cudaStreamSynchronize(s);
      },
      "WmmaLoadAt: load_matrix_sync at .* the pointer must be 256-bit aligned");
  EXPECT_DEATH(
      {
        AMPD_EMU_LAUNCH(WmmaLoadAt, 1, 32, s)(0, 20u);
        cudaStreamSynchronize(s);
      },
      "WmmaLoadAt: load_matrix_sync at .* with ldm 20: .* a multiple of 8");
}

TEST(CudaEmuDeathTest, ABarrierNotEveryThreadReachesAborts) {
  EXPECT_DEATH(
      {
        cudaStream_t s = NewStream();
        int* out = DeviceAlloc<int>(64);
        AMPD_EMU_LAUNCH(ThreadZeroLeavesEarly, 1, 64, s)(out);
        cudaStreamSynchronize(s);
      },
      "ThreadZeroLeavesEarly.*63 threads wait at __syncthreads that 1 others never reach");
}

TEST(CudaEmuTest, SyncwarpIsABarrierForTheWarpOnly) {
  cudaStream_t s = NewStream();
  int* out = DeviceAlloc<int>(2);
  std::vector<int> host(2);
  for (int base : {100, 200}) {
    AMPD_EMU_LAUNCH(PassWithinTheWarp, 1, 64, s)(base, out);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), out, 2 * sizeof(int), cudaMemcpyDeviceToHost, s),
              cudaSuccess);
    EXPECT_EQ(host[0], base);
    EXPECT_EQ(host[1], base + 1);
  }
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

// Shuffles exchange within the warp, never across warps, and a butterfly sum
// leaves every lane of a warp the same sum (the real exchange's result).
TEST(CudaEmuTest, ShuffleXorExchangesWithinTheWarp) {
  cudaStream_t s = NewStream();
  float* in = DeviceAlloc<float>(64);
  float* sum = DeviceAlloc<float>(64);
  int* partner = DeviceAlloc<int>(64);
  std::vector<float> values(64);
  for (int t = 0; t < 64; ++t) values[t] = static_cast<float>(t < 32 ? t : 100 * t);
  ASSERT_EQ(cudaMemcpyAsync(in, values.data(), 64 * sizeof(float), cudaMemcpyHostToDevice, s),
            cudaSuccess);
  AMPD_EMU_LAUNCH(ButterflySums, 1, 64, s)(in, sum, partner);
  std::vector<float> sums(64);
  std::vector<int> partners(64);
  ASSERT_EQ(cudaMemcpyAsync(sums.data(), sum, 64 * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(partners.data(), partner, 64 * sizeof(int), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(partners[t], t ^ 5) << t;
    EXPECT_EQ(sums[t], t < 32 ? 496.0f : 100.0f * (32 * 32 + 496)) << t;
  }
  EXPECT_EQ(cudaFree(in), cudaSuccess);
  EXPECT_EQ(cudaFree(sum), cudaSuccess);
  EXPECT_EQ(cudaFree(partner), cudaSuccess);
}

TEST(CudaEmuDeathTest, ASyncwarpPartOfTheWarpNeverReachesAborts) {
  EXPECT_DEATH(
      {
        cudaStream_t s = NewStream();
        int* out = DeviceAlloc<int>(64);
        AMPD_EMU_LAUNCH(HalfAWarpLeaves, 1, 64, s)(out);
        cudaStreamSynchronize(s);
      },
      "HalfAWarpLeaves.*32 threads wait at __syncwarp that others of their warp never reach");
}

// The WMMA stand-in computes a warp's tile once, as the warp does together:
// its 32 threads all load C and store D, and D is A B + C, not C plus 32
// products (what threads loading and storing one after another would leave).
TEST(CudaEmuTest, WmmaTileIsTheWarpsOneProduct) {
  cudaStream_t s = NewStream();
  std::vector<__half> a(256), bt(256);
  std::vector<float> c(256), want(256);
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2half_rn(static_cast<float>(i % 7) - 3);
    bt[i] = __float2half_rn(static_cast<float>(i % 5) - 2);
    c[i] = static_cast<float>(i % 3);
  }
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float sum = c[i * 16 + j];
      for (int k = 0; k < 16; ++k)
        sum += __half2float(a[i * 16 + k]) * __half2float(bt[j * 16 + k]);
      want[i * 16 + j] = sum;
    }
  }
  __half* da = DeviceAlloc<__half>(256);
  __half* dbt = DeviceAlloc<__half>(256);
  float* dcd = DeviceAlloc<float>(256);
  ASSERT_EQ(cudaMemcpyAsync(da, a.data(), 512, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dbt, bt.data(), 512, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dcd, c.data(), 1024, cudaMemcpyHostToDevice, s), cudaSuccess);
  AMPD_EMU_LAUNCH(OneTile, 1, 32, s)(da, dbt, dcd);
  std::vector<float> got(256);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), dcd, 1024, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(got, want);
  EXPECT_EQ(cudaFree(da), cudaSuccess);
  EXPECT_EQ(cudaFree(dbt), cudaSuccess);
  EXPECT_EQ(cudaFree(dcd), cudaSuccess);
}

// The stand-in for mma.sync m16n8k16 follows the PTX ISA's fragment table,
// in bf16 and f16: the layout the mma.sync attention kernels rely on.
template <typename T>
void CheckOneMmaSync(float (*to_float)(T), T (*from_float)(float)) {
  cudaStream_t s = NewStream();
  std::vector<T> a(16 * 16), b(16 * 8);
  std::vector<float> c(16 * 8), want(16 * 8);
  for (int i = 0; i < 256; ++i) a[i] = from_float(static_cast<float>(i % 11) - 5);
  for (int i = 0; i < 128; ++i) b[i] = from_float(static_cast<float>(i % 13) * 0.5f - 3);
  for (int i = 0; i < 128; ++i) c[i] = static_cast<float>(i);
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      float sum = c[r * 8 + n];
      for (int k = 0; k < 16; ++k) sum += to_float(a[r * 16 + k]) * to_float(b[k * 8 + n]);
      want[r * 8 + n] = sum;
    }
  }
  T* da = DeviceAlloc<T>(256);
  T* db = DeviceAlloc<T>(128);
  float* dcd = DeviceAlloc<float>(128);
  ASSERT_EQ(cudaMemcpyAsync(da, a.data(), 512, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(db, b.data(), 256, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dcd, c.data(), 512, cudaMemcpyHostToDevice, s), cudaSuccess);
  AMPD_EMU_LAUNCH(OneMmaSync<T>, 1, 32, s)(da, db, dcd);
  std::vector<float> got(128);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), dcd, 512, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(got, want);
  EXPECT_EQ(cudaFree(da), cudaSuccess);
  EXPECT_EQ(cudaFree(db), cudaSuccess);
  EXPECT_EQ(cudaFree(dcd), cudaSuccess);
}

TEST(CudaEmuTest, MmaSyncFragmentsFollowThePtxTable) {
  CheckOneMmaSync<__nv_bfloat16>(__bfloat162float, __float2bfloat16_rn);
  CheckOneMmaSync<__half>(__half2float, __float2half_rn);
}

// The stand-in for ldmatrix follows the PTX ISA: register i of lane (g, q)
// holds matrix i's row g, columns 2q and 2q + 1, the first in the low half;
// with .trans rows 2q and 2q + 1 of column g. A misaligned row address aborts
// (a GPU faults).
template <bool kTrans>
void CheckOneLdMatrix() {
  cudaStream_t s = NewStream();
  std::vector<uint16_t> tile(256);
  for (int e = 0; e < 256; ++e) tile[e] = static_cast<uint16_t>(1000 + e);
  uint16_t* dt = DeviceAlloc<uint16_t>(256);
  uint32_t* dout = DeviceAlloc<uint32_t>(128);
  ASSERT_EQ(cudaMemcpyAsync(dt, tile.data(), 512, cudaMemcpyHostToDevice, s), cudaSuccess);
  AMPD_EMU_LAUNCH(OneLdMatrix<kTrans>, 1, 32, s)(dt, dout);
  std::vector<uint32_t> got(128);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), dout, 512, cudaMemcpyDeviceToHost, s), cudaSuccess);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int r0 = 8 * (i % 2), c0 = 8 * (i / 2);
      uint32_t want = 0;
      for (int k = 0; k < 2; ++k) {
        const int row = kTrans ? 2 * q + k : g, col = kTrans ? g : 2 * q + k;
        want |= static_cast<uint32_t>(tile[(r0 + row) * 16 + c0 + col]) << (16 * k);
      }
      EXPECT_EQ(got[lane * 4 + i], want) << "lane " << lane << " register " << i;
    }
  }
  EXPECT_EQ(cudaFree(dt), cudaSuccess);
  EXPECT_EQ(cudaFree(dout), cudaSuccess);
}

TEST(CudaEmuTest, LdMatrixFragmentsFollowThePtxIsa) {
  CheckOneLdMatrix<false>();
  CheckOneLdMatrix<true>();
}

TEST(CudaEmuDeathTest, AMisalignedLdMatrixRowAborts) {
  EXPECT_DEATH(
      {
        cudaStream_t s = NewStream();
        uint32_t* dout = DeviceAlloc<uint32_t>(32);
        AMPD_EMU_LAUNCH(MisalignedLdMatrix, 1, 32, s)(dout);
        cudaStreamSynchronize(s);
      },
      "ldmatrix row address .* is not 16-byte aligned");
}

// cp.async's stand-ins land nothing before the wait that covers a copy (a
// kernel reading a tile too early sees its old bytes, as it may on a GPU),
// WaitAsyncCopies<N> leaves the newest N groups pending, and a thread that
// returns with copies pending aborts.
TEST(CudaEmuTest, AsyncCopiesLandAtTheWaitThatCoversThem) {
  cudaStream_t s = NewStream();
  std::vector<int> src(256);
  for (int i = 0; i < 256; ++i) src[i] = 100 + i;
  int* dsrc = DeviceAlloc<int>(256);
  int* dseen = DeviceAlloc<int>(96);
  ASSERT_EQ(cudaMemcpyAsync(dsrc, src.data(), 1024, cudaMemcpyHostToDevice, s), cudaSuccess);
  AMPD_EMU_LAUNCH(CopyInTwoGroups, 1, 32, s)(dsrc, dseen);
  std::vector<int> seen(96);
  ASSERT_EQ(cudaMemcpyAsync(seen.data(), dseen, 384, cudaMemcpyDeviceToHost, s), cudaSuccess);
  for (int t = 0; t < 32; ++t) {
    const int word = (t * 8) % 256;
    EXPECT_EQ(seen[t], 7) << "thread " << t << " before any wait";
    EXPECT_EQ(seen[32 + t], word < 128 ? 100 + word : 7) << "thread " << t << " after wait 1";
    EXPECT_EQ(seen[64 + t], 100 + word) << "thread " << t << " after wait 0";
  }
  EXPECT_EQ(cudaFree(dsrc), cudaSuccess);
  EXPECT_EQ(cudaFree(dseen), cudaSuccess);
}

TEST(CudaEmuDeathTest, AThreadReturningWithAsyncCopiesPendingAborts) {
  EXPECT_DEATH(
      {
        cudaStream_t s = NewStream();
        int* src = DeviceAlloc<int>(128);
        int* out = DeviceAlloc<int>(32);
        AMPD_EMU_LAUNCH(ForgetsToWait, 1, 32, s)(src, out);
        cudaStreamSynchronize(s);
      },
      "ForgetsToWait.*thread 3 returned with 1 cp.async copies it never waited for");
}

// The fake cuBLASLt through the real GemmRunner (gemm.cu).
TEST(CudaEmuTest, ALauncherRefusesAnOpOutsideItsFamilyBeforeAnyLaunch) {
  // What the old `default:` did: compute x * x for any op it did not know.
  using ampd::engine::OpId;
  float* x = nullptr;
  float* y = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&x), 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&y), 4 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(ampd::engine::cuda::LaunchUnary(OpId::kSoftmax, x, 0, y, 0, 4, nullptr),
            "LaunchUnary: op softmax has no CUDA kernel here");
  EXPECT_EQ(ampd::engine::cuda::LaunchUnaryBackward(OpId::kAdd, x, 0, x, 0, y, 4, nullptr),
            "LaunchUnaryBackward: op add has no CUDA kernel here");
  EXPECT_EQ(ampd::engine::cuda::LaunchBinary(OpId::kRelu, x, 0, x, 0, 4, y, 0, 4, nullptr),
            "LaunchBinary: op relu has no CUDA kernel here");
  // And the families still run.
  EXPECT_EQ(ampd::engine::cuda::LaunchUnary(OpId::kRelu, x, 0, y, 0, 4, nullptr), "");
  cudaFree(x);
  cudaFree(y);
}

TEST(CudaEmuTest, CublasLtRefusesWhatTheRealOneRefuses) {
  cudaStream_t s = NewStream();
  const int64_t m = 16, n = 10, k = 8;
  float* a = DeviceAlloc<float>(m * k + 64);
  float* b = DeviceAlloc<float>(k * n);
  float* c = DeviceAlloc<float>(m * n);
  float* aux = DeviceAlloc<float>(m * n);
  float* bias = DeviceAlloc<float>(n);
  ampd::engine::cuda::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.b = b;
  g.c = c;
  auto& runner = ampd::engine::cuda::GemmRunner::ForThisThread();
  EXPECT_EQ(runner.Run(g, s), "");
  // Not 256-byte aligned: the heuristic's algorithm cannot take it.
  g.a = a + 1;
  EXPECT_NE(runner.Run(g, s).find("cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE"),
            std::string::npos);
  g.a = a;
  // The GELU aux leading dimension (n = 10) must be a multiple of 8.
  g.epilogue = ampd::engine::cuda::Epilogue::kGeluAuxBias;
  g.aux = aux;
  g.bias = bias;
  EXPECT_NE(runner.Run(g, s).find("cublasLtMatmulAlgoGetHeuristic"), std::string::npos);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c),
                  static_cast<void*>(aux), static_cast<void*>(bias)}) {
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  }
}

// cuBLASLt's FP8 GEMMs as Hopper's: "TN" (our row-major A [m, k] times
// B [n, k]^T), k and n multiples of 16, not E5M2 x E5M2, the product times
// both scales; and our runner asks for both scales.
TEST(CudaEmuTest, CublasLtFp8GemmsAreTnAlignedAndScaled) {
  using ampd::engine::core::F32ToFp8;
  using ampd::engine::core::Fp8Format;
  cudaStream_t s = NewStream();
  const int64_t m = 4, n = 16, k = 32;
  std::vector<uint8_t> ha(m * k), hb(n * k);
  std::vector<float> fa(m * k), fb(n * k);
  for (int64_t i = 0; i < m * k; ++i) {
    fa[i] = static_cast<float>((i % 7) - 3) * 0.5f;  // exact in E4M3
    ha[i] = F32ToFp8(fa[i], Fp8Format::kE4M3, true);
  }
  for (int64_t i = 0; i < n * k; ++i) {
    fb[i] = static_cast<float>((i % 5) - 2);  // exact in E5M2
    hb[i] = F32ToFp8(fb[i], Fp8Format::kE5M2, true);
  }
  uint8_t* a = DeviceAlloc<uint8_t>(m * k);
  uint8_t* b = DeviceAlloc<uint8_t>(n * k);
  float* c = DeviceAlloc<float>(m * n);
  float* scales = DeviceAlloc<float>(2);
  const float hs[2] = {0.25f, 8.0f};
  ASSERT_EQ(cudaMemcpyAsync(a, ha.data(), ha.size(), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, hb.data(), hb.size(), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(scales, hs, sizeof(hs), cudaMemcpyHostToDevice, s), cudaSuccess);
  ampd::engine::cuda::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_b = true;
  g.a = a;
  g.b = b;
  g.c = c;
  g.ab_dtype = ampd::engine::cuda::kGemmE4M3;
  g.b_dtype = ampd::engine::cuda::kGemmE5M2;
  g.a_scale = scales;
  g.b_scale = scales + 1;
  auto& runner = ampd::engine::cuda::GemmRunner::ForThisThread();
  ASSERT_EQ(runner.Run(g, s), "");
  std::vector<float> got(m * n);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), c, got.size() * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float want = 0;
      for (int64_t l = 0; l < k; ++l) want += fa[i * k + l] * fb[j * k + l];
      EXPECT_EQ(got[i * n + j], want * hs[0] * hs[1]) << i << "," << j;
    }
  }
  // Refused: not TN; n not a multiple of 16; both E5M2.
  g.trans_b = false;
  g.k = n;  // B read as [k, n] = [16, 32]: the shapes agree, only the layout is refused
  g.n = k;
  EXPECT_NE(runner.Run(g, s).find("cublasLtMatmulAlgoGetHeuristic"), std::string::npos);
  g.trans_b = true;
  g.k = k;
  g.n = 8;
  EXPECT_NE(runner.Run(g, s).find("cublasLtMatmulAlgoGetHeuristic"), std::string::npos);
  g.n = n;
  g.ab_dtype = ampd::engine::cuda::kGemmE5M2;
  EXPECT_NE(runner.Run(g, s).find("cublasLtMatmulAlgoGetHeuristic"), std::string::npos);
  g.ab_dtype = ampd::engine::cuda::kGemmE4M3;
  // cuBLASLt would take a missing scale as 1; ours is always a tensor's.
  g.b_scale = nullptr;
  EXPECT_NE(runner.Run(g, s).find("needs both decode scales"), std::string::npos);
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c),
                  static_cast<void*>(scales)}) {
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  }
}

}  // namespace

namespace {

// A convolution problem as conv.cu describes it, for the fake cuDNN's checks.
struct DnnProblem {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnHandle_t handle = nullptr;
  DnnProblem() {
    cudnnCreate(&handle);
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateFilterDescriptor(&w);
    cudnnCreateConvolutionDescriptor(&conv);
    // [2, 4, 8, 8] * [6, 4, 3, 3], padding 1 -> [2, 6, 8, 8].
    cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 8, 8);
    cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 6, 8, 8);
    cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 6, 4, 3, 3);
    cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                    CUDNN_DATA_FLOAT);
  }
  ~DnnProblem() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroy(handle);
  }
  cudnnStatus_t Heuristic() {
    cudnnConvolutionFwdAlgoPerf_t perf[4];
    int n = 0;
    return cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, 4, &n, perf);
  }
};

}  // namespace

TEST(CudaEmuTest, FakeCudnnRefusesWhatCudnnDocuments) {
  {
    DnnProblem p;
    EXPECT_EQ(p.Heuristic(), CUDNN_STATUS_SUCCESS);
  }
  {
    DnnProblem p;  // an output that is not the convolution's
    cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 6, 6, 6);
    EXPECT_EQ(p.Heuristic(), CUDNN_STATUS_BAD_PARAM);
  }
  {
    DnnProblem p;  // 4 input channels in 3 groups
    cudnnSetConvolutionGroupCount(p.conv, 3);
    EXPECT_EQ(p.Heuristic(), CUDNN_STATUS_BAD_PARAM);
  }
  {
    DnnProblem p;  // f32 data, bf16 filter
    cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW, 6, 4, 3, 3);
    EXPECT_EQ(p.Heuristic(), CUDNN_STATUS_NOT_SUPPORTED);
  }
  {
    DnnProblem p;  // f32 data with a DOUBLE compute type is no configuration
    cudnnSetConvolution2dDescriptor(p.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                    CUDNN_DATA_DOUBLE);
    EXPECT_EQ(p.Heuristic(), CUDNN_STATUS_NOT_SUPPORTED);
  }
  DnnProblem p;
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(p.conv, -1, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(p.conv, 0, 0, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, 4, 8, 8),
            CUDNN_STATUS_BAD_PARAM);
}

TEST(CudaEmuTest, FakeCudnnWantsDevicePointersAndTheWorkspaceItAskedFor) {
  DnnProblem p;
  std::vector<float> host(2 * 6 * 8 * 8);
  void *x = nullptr, *w = nullptr, *y = nullptr;
  ASSERT_EQ(cudaMalloc(&x, 2 * 4 * 8 * 8 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w, 6 * 4 * 3 * 3 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, 2 * 6 * 8 * 8 * 4), cudaSuccess);
  const float one = 1, zero = 0;
  EXPECT_EQ(cudnnConvolutionForward(p.handle, &one, p.x, x, p.w, w, p.conv,
                                    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                    p.y, host.data()),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(
      cudnnConvolutionForward(p.handle, &one, p.x, x, p.w, w, p.conv,
                              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, p.y, y),
      CUDNN_STATUS_SUCCESS);
  // The deterministic backward algorithm asked for 1 KiB of workspace.
  EXPECT_EQ(
      cudnnConvolutionBackwardData(p.handle, &one, p.w, w, p.y, y, p.conv,
                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, nullptr, 0, &zero, p.x, x),
      CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
}
