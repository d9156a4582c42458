// The CPU emulator's runtime: device and pinned memory bookkeeping, streams
// whose work runs when the host waits on them, events, errors (a "last" error
// and a sticky one, as CUDA keeps them), and kernel grids run a block at a
// time with each of the block's threads on its own fiber so that
// __syncthreads is a real barrier.

#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define AMPD_EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fibers switch stacks with x86-64 assembly"
#endif

uint3 threadIdx{0, 0, 0};
uint3 blockIdx{0, 0, 0};
dim3 blockDim{1, 1, 1};
dim3 gridDim{1, 1, 1};

struct CUevent_st {
  CUstream_st* stream = nullptr;
  uint64_t generation = 0;  // of the latest record
  bool pending = false;
  bool timed = true;
  std::chrono::steady_clock::time_point reached;  // when the latest record ran
};

struct CUstream_st {
  struct Item {
    std::function<void()> work;
    CUevent_st* event = nullptr;  // a record: marks the event reached
    uint64_t generation = 0;
  };
  std::deque<Item> queue;
};

namespace cudaemu {
namespace {

std::recursive_mutex& Mu() {
  static std::recursive_mutex* mu = new std::recursive_mutex;
  return *mu;
}
using Lock = std::lock_guard<std::recursive_mutex>;

struct State {
  std::map<uintptr_t, size_t> device, pinned;  // start -> bytes
  size_t device_in_use = 0;
  size_t capacity = 0;
  cudaError_t last = cudaSuccess, sticky = cudaSuccess;
  std::string why;
  CUstream_st default_stream;
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::vector<std::unique_ptr<CUevent_st>> events;
  Counters counters;
};

State& St() {
  static State* s = [] {
    auto* st = new State;
    const char* mib = std::getenv("AMPD_CUDA_EMU_MEMORY_MIB");
    st->capacity = (mib ? std::strtoull(mib, nullptr, 10) : 4096) << 20;
    return st;
  }();
  return *s;
}

cudaError_t Fail(cudaError_t e, const std::string& why) {
  State& s = St();
  s.last = e;
  s.why = why;
  if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
      e == cudaErrorMisalignedAddress) {
    if (s.sticky == cudaSuccess) {
      s.sticky = e;
      std::fprintf(stderr, "cuda emulator: sticky error: %s\n", why.c_str());
    }
  }
  return e;
}

CUstream_st* Resolve(cudaStream_t s) { return s ? s : &St().default_stream; }

bool InRange(const std::map<uintptr_t, size_t>& m, const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + std::max<size_t>(it->second, 1);
}

void RunQueue(CUstream_st* s, CUevent_st* until) {
  while (!s->queue.empty()) {
    CUstream_st::Item item = std::move(s->queue.front());
    s->queue.pop_front();
    if (item.work) item.work();
    if (item.event && item.event->generation == item.generation) {
      item.event->pending = false;
      item.event->reached = std::chrono::steady_clock::now();
      if (item.event == until) return;
    }
  }
}

void SynchronizeAll() {
  State& s = St();
  RunQueue(&s.default_stream, nullptr);
  for (auto& st : s.streams) RunQueue(st.get(), nullptr);
}

// ---- fibers

constexpr size_t kStackBytes = 64 << 10;
constexpr size_t kGuardBytes = 4096;
constexpr int kMaxThreads = 1024;

enum class FiberState { kReady, kBarrier, kWarpBarrier, kDone };
constexpr int kWarpSize = 32;
struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;  // lowest usable byte
  FiberState state = FiberState::kReady;
};

Fiber g_fibers[kMaxThreads];
void* g_scheduler_sp = nullptr;
int g_current = 0;
bool g_direct = false;  // running threads as plain calls: no barrier allowed
bool g_reverse = [] {
  const char* order = std::getenv("AMPD_CUDA_EMU_THREAD_ORDER");
  return order != nullptr && std::string(order) == "reverse";
}();
// The i-th thread to run of `threads`.
int Nth(int i, int threads) { return g_reverse ? threads - 1 - i : i; }
const char* g_kernel = "";
const std::function<void()>* g_body = nullptr;
#ifdef AMPD_EMU_ASAN
const void* g_scheduler_bottom = nullptr;
size_t g_scheduler_size = 0;
void* g_fake_stacks[kMaxThreads];
void* g_scheduler_fake = nullptr;
#endif

}  // namespace
}  // namespace cudaemu

// void ampd_emu_switch(void** save_sp, void* load_sp): saves the callee-saved
// registers on the current stack, stores the stack pointer in *save_sp, and
// resumes the context whose stack pointer is load_sp. The FP control words
// (MXCSR, x87) are not switched: no kernel changes them.
extern "C" void ampd_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl ampd_emu_switch
  .type ampd_emu_switch, @function
ampd_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ampd_emu_switch, .-ampd_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace cudaemu {
namespace {

void SwitchToScheduler(bool exiting) {
  Fiber& f = g_fibers[g_current];
#ifdef AMPD_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &g_fake_stacks[g_current], g_scheduler_bottom,
                                 g_scheduler_size);
#else
  (void)exiting;
#endif
  ampd_emu_switch(&f.sp, g_scheduler_sp);
#ifdef AMPD_EMU_ASAN
  __sanitizer_finish_switch_fiber(g_fake_stacks[g_current], nullptr, nullptr);
#endif
}

void CheckNoAsyncCopiesLeft(int t);

[[noreturn]] void FiberMain() {
#ifdef AMPD_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_scheduler_bottom, &g_scheduler_size);
#endif
  (*g_body)();
  CheckNoAsyncCopiesLeft(g_current);
  g_fibers[g_current].state = FiberState::kDone;
  SwitchToScheduler(/*exiting=*/true);
  std::abort();  // a finished fiber is never resumed
}

void EnsureStacks(int threads) {
  for (int t = 0; t < threads; ++t) {
    if (g_fibers[t].stack) continue;
    void* mem = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
      std::fprintf(stderr, "cuda emulator: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(mem, kGuardBytes, PROT_NONE);  // overflow faults instead of corrupting
    g_fibers[t].stack = static_cast<char*>(mem) + kGuardBytes;
  }
}

void StartFiber(Fiber& f) {
  // The frame ampd_emu_switch pops: r15..rbp, then the return address
  // (FiberMain), which is entered with rsp % 16 == 8, as after a call.
  char* top = f.stack + kStackBytes;
  auto* sp = reinterpret_cast<uint64_t*>(top - 80);  // rsp after ret: top - 24
  for (int i = 0; i < 6; ++i) sp[i] = 0;
  sp[6] = reinterpret_cast<uint64_t>(&FiberMain);
  sp[7] = 0;
  f.sp = sp;
  f.state = FiberState::kReady;
}

void SetThreadIdx(int t) {
  threadIdx.x = t % blockDim.x;
  threadIdx.y = (t / blockDim.x) % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

// Runs every thread of the current block; returns the number of barriers hit.
// A pass resumes each ready thread until it finishes or waits: at
// __syncthreads (the block's barrier) or at __syncwarp (its warp's: threads
// t / 32 alike). A warp whose threads all wait at __syncwarp goes on at once;
// the block's barrier opens when every thread waits there.
int64_t RunBlockOnFibers(int threads) {
  for (int t = 0; t < threads; ++t) StartFiber(g_fibers[t]);
  int64_t barriers = 0;
  for (;;) {
    for (int i = 0; i < threads; ++i) {
      const int t = Nth(i, threads);
      Fiber& f = g_fibers[t];
      if (f.state != FiberState::kReady) continue;
      g_current = t;
      SetThreadIdx(t);
#ifdef AMPD_EMU_ASAN
      __sanitizer_start_switch_fiber(&g_scheduler_fake, f.stack, kStackBytes);
#endif
      ampd_emu_switch(&g_scheduler_sp, f.sp);
#ifdef AMPD_EMU_ASAN
      __sanitizer_finish_switch_fiber(g_scheduler_fake, nullptr, nullptr);
#endif
    }
    int done = 0, at_block = 0, at_warp = 0;
    bool released = false;
    for (int w = 0; w * kWarpSize < threads; ++w) {
      const int end = std::min(threads, (w + 1) * kWarpSize);
      int warp_waiting = 0;
      for (int t = w * kWarpSize; t < end; ++t) {
        const FiberState st = g_fibers[t].state;
        done += st == FiberState::kDone;
        at_block += st == FiberState::kBarrier;
        warp_waiting += st == FiberState::kWarpBarrier;
      }
      // Every thread of the warp: one that has returned never arrives.
      if (warp_waiting > 0 && warp_waiting == end - w * kWarpSize) {
        for (int t = w * kWarpSize; t < end; ++t) {
          if (g_fibers[t].state == FiberState::kWarpBarrier) g_fibers[t].state = FiberState::kReady;
        }
        released = true;
      } else {
        at_warp += warp_waiting;
      }
    }
    if (released) {
      // Warp barriers count too: a kernel synchronised only by shuffles must
      // run every block on fibers, not just the first.
      ++barriers;
      continue;
    }
    if (at_warp > 0) {
      std::fprintf(stderr,
                   "cuda emulator: %s: block (%u,%u,%u): %d threads wait at __syncwarp that "
                   "others of their warp never reach (undefined behaviour on a GPU)\n",
                   g_kernel, blockIdx.x, blockIdx.y, blockIdx.z, at_warp);
      std::abort();
    }
    if (at_block == 0) return barriers;
    if (done > 0) {
      std::fprintf(stderr,
                   "cuda emulator: %s: block (%u,%u,%u): %d threads wait at __syncthreads that "
                   "%d others never reach (undefined behaviour on a GPU)\n",
                   g_kernel, blockIdx.x, blockIdx.y, blockIdx.z, at_block, done);
      std::abort();
    }
    ++barriers;
    for (int t = 0; t < threads; ++t) g_fibers[t].state = FiberState::kReady;
  }
}

}  // namespace

bool Tracing() {
  static const bool on = [] {
    const char* v = std::getenv("AMPD_CUDA_EMU_TRACE");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

void RunGrid(const char* name, dim3 grid, dim3 block, const std::function<void()>& thread_body) {
  State& s = St();
  ++s.counters.launches;
  ++s.counters.launches_of[name];
  if (Tracing()) {
    std::fprintf(stderr, "cuda emulator: kernel %s grid (%u,%u,%u) block (%u,%u,%u)\n", name,
                 grid.x, grid.y, grid.z, block.x, block.y, block.z);
  }
  g_kernel = name;
  g_body = &thread_body;
  gridDim = grid;
  blockDim = block;
  const int threads = static_cast<int>(block.x * block.y * block.z);
  EnsureStacks(threads);
  // Block 0 runs on fibers; if it never waits at a barrier, the kernel does
  // not use them and the other blocks run their threads as plain calls.
  bool uses_barriers = true;
  bool first = true;
  // Blocks run one after another, in reverse too with the threads: a block
  // that reads what another block of the same launch writes (a race on a
  // GPU, where blocks run in any order and at once) sees the write in one
  // order and not in the other.
  auto nth = [](unsigned i, unsigned n) { return g_reverse ? n - 1 - i : i; };
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        const unsigned x = nth(bx, grid.x), y = nth(by, grid.y), z = nth(bz, grid.z);
        blockIdx = uint3{x, y, z};
        if (first || uses_barriers) {
          const int64_t barriers = RunBlockOnFibers(threads);
          s.counters.barriers += barriers;
          ++s.counters.fiber_blocks;
          if (first) uses_barriers = barriers > 0;
          first = false;
          continue;
        }
        g_direct = true;
        for (int i = 0; i < threads; ++i) {
          SetThreadIdx(Nth(i, threads));
          g_current = Nth(i, threads);
          thread_body();
          CheckNoAsyncCopiesLeft(g_current);
        }
        g_direct = false;
        ++s.counters.direct_blocks;
      }
    }
  }
}

void Enqueue(cudaStream_t s, std::function<void()> fn) {
  Lock lock(Mu());
  Resolve(s)->queue.push_back(CUstream_st::Item{std::move(fn), nullptr, 0});
}

cudaError_t SetLaunchError(cudaError_t e, const std::string& why) {
  Lock lock(Mu());
  return Fail(e, why);
}

cudaError_t StickyError() {
  Lock lock(Mu());
  return St().sticky;
}

bool IsDeviceRange(const void* p, size_t bytes) {
  Lock lock(Mu());
  return InRange(St().device, p, bytes);
}

void SetReverseThreadOrder(bool reverse) {
  Lock lock(Mu());
  g_reverse = reverse;
}

Counters GetCounters() {
  Lock lock(Mu());
  return St().counters;
}

}  // namespace cudaemu

using cudaemu::Fail;
using cudaemu::Lock;
using cudaemu::Mu;
using cudaemu::St;

void __syncthreads() {
  if (cudaemu::g_direct) {
    std::fprintf(stderr,
                 "cuda emulator: %s: block (%u,%u,%u) reached __syncthreads although block 0 "
                 "never did\n",
                 cudaemu::g_kernel, blockIdx.x, blockIdx.y, blockIdx.z);
    std::abort();
  }
  cudaemu::g_fibers[cudaemu::g_current].state = cudaemu::FiberState::kBarrier;
  cudaemu::SwitchToScheduler(/*exiting=*/false);
}

void __syncwarp(unsigned mask) {
  if (mask != 0xFFFFFFFFu) {
    std::fprintf(stderr, "cuda emulator: %s: __syncwarp with a partial mask is not emulated\n",
                 cudaemu::g_kernel);
    std::abort();
  }
  if (cudaemu::g_direct) {
    std::fprintf(stderr,
                 "cuda emulator: %s: block (%u,%u,%u) reached __syncwarp although block 0 "
                 "never waited\n",
                 cudaemu::g_kernel, blockIdx.x, blockIdx.y, blockIdx.z);
    std::abort();
  }
  cudaemu::g_fibers[cudaemu::g_current].state = cudaemu::FiberState::kWarpBarrier;
  cudaemu::SwitchToScheduler(/*exiting=*/false);
}

namespace cudaemu {
namespace {
uint64_t g_shuffle_slots[kMaxThreads];

template <typename T>
T ShuffleXor(unsigned mask, T v, int lane_mask, int width) {
  if (mask != 0xFFFFFFFFu || width != kWarpSize || lane_mask < 0 || lane_mask >= kWarpSize) {
    std::fprintf(stderr,
                 "cuda emulator: %s: __shfl_xor_sync with a partial mask, a width other than 32 "
                 "or lane mask %d is not emulated\n",
                 g_kernel, lane_mask);
    std::abort();
  }
  const int t = g_current;
  const int partner = (t & ~(kWarpSize - 1)) | ((t % kWarpSize) ^ lane_mask);
  const int threads = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  if (partner >= threads) {
    std::fprintf(stderr,
                 "cuda emulator: %s: __shfl_xor_sync in a warp of fewer than 32 threads "
                 "(undefined on a GPU)\n",
                 g_kernel);
    std::abort();
  }
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  g_shuffle_slots[t] = bits;
  __syncwarp();  // every lane has published its value
  bits = g_shuffle_slots[partner];
  __syncwarp();  // every lane has read before any publishes the next one
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace
}  // namespace cudaemu

namespace cudaemu {
namespace {
struct MmaSlot {
  uint32_t a[4], b[2];
};
MmaSlot g_mma_slots[kMaxThreads];

float HalfBits(uint32_t reg, int half, bool bf16) {
  const uint16_t bits = static_cast<uint16_t>(half == 0 ? reg : reg >> 16);
  return bf16 ? ampd::engine::core::BF16BitsToF32(bits) : ampd::engine::core::F16BitsToF32(bits);
}
}  // namespace
}  // namespace cudaemu

void AmpdEmuMmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool bf16) {
  using namespace cudaemu;
  const int t = g_current, base = t & ~(kWarpSize - 1);
  if (base + kWarpSize > static_cast<int>(blockDim.x * blockDim.y * blockDim.z)) {
    std::fprintf(stderr, "cuda emulator: %s: mma.sync in a warp of fewer than 32 threads\n",
                 g_kernel);
    std::abort();
  }
  for (int i = 0; i < 4; ++i) g_mma_slots[t].a[i] = a[i];
  for (int i = 0; i < 2; ++i) g_mma_slots[t].b[i] = b[i];
  __syncwarp();  // every lane has published its fragments
  const int lane = t % kWarpSize, g = lane / 4, q = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) {
      // A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 (k >= 8).
      const MmaSlot& as = g_mma_slots[base + (row % 8) * 4 + (k % 8) / 2];
      const float av = HalfBits(as.a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1, bf16);
      // B[k][col]: lane col * 4 + (k % 8) / 2, register k >= 8.
      const MmaSlot& bs = g_mma_slots[base + col * 4 + (k % 8) / 2];
      const float bv = HalfBits(bs.b[k >= 8 ? 1 : 0], k & 1, bf16);
      acc += av * bv;
    }
    out[i] = acc;
  }
  __syncwarp();  // every lane has read before any publishes again
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

namespace cudaemu {
namespace {
const void* g_ldmatrix_rows[kMaxThreads];
}  // namespace
}  // namespace cudaemu

void AmpdEmuLdMatrixX4(uint32_t (&r)[4], const void* row, bool trans) {
  using namespace cudaemu;
  const int t = g_current, base = t & ~(kWarpSize - 1);
  if (base + kWarpSize > static_cast<int>(blockDim.x * blockDim.y * blockDim.z)) {
    std::fprintf(stderr, "cuda emulator: %s: ldmatrix in a warp of fewer than 32 threads\n",
                 g_kernel);
    std::abort();
  }
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "cuda emulator: %s: ldmatrix row address %p is not 16-byte aligned\n",
                 g_kernel, row);
    std::abort();
  }
  g_ldmatrix_rows[t] = row;
  __syncwarp();  // every lane has published its row's address
  const int lane = t % kWarpSize, g = lane / 4, q = lane % 4;
  uint32_t out[4];
  for (int i = 0; i < 4; ++i) {
    uint16_t v[2];
    for (int k = 0; k < 2; ++k) {
      // Matrix i's element (row, col): row `row` of lane 8 i + row, column col.
      const int mrow = trans ? 2 * q + k : g, mcol = trans ? g : 2 * q + k;
      const auto* bytes = static_cast<const unsigned char*>(g_ldmatrix_rows[base + 8 * i + mrow]);
      std::memcpy(&v[k], bytes + 2 * mcol, 2);
    }
    out[i] = static_cast<uint32_t>(v[0]) | (static_cast<uint32_t>(v[1]) << 16);
  }
  __syncwarp();  // every lane has read before any publishes again
  for (int i = 0; i < 4; ++i) r[i] = out[i];
}

namespace cudaemu {
namespace {
struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes;
  int64_t group;
};
// Per thread of the block: its queued copies, and the number of its commits.
std::deque<AsyncCopy> g_async_copies[kMaxThreads];
int64_t g_async_commits[kMaxThreads];

// Called as each thread returns: no copies left, and its commits start over.
void CheckNoAsyncCopiesLeft(int t) {
  if (!g_async_copies[t].empty()) {
    std::fprintf(stderr,
                 "cuda emulator: %s: block (%u,%u,%u) thread %d returned with %zu cp.async copies "
                 "it never waited for\n",
                 g_kernel, blockIdx.x, blockIdx.y, blockIdx.z, t, g_async_copies[t].size());
    std::abort();
  }
  g_async_commits[t] = 0;
}
}  // namespace
}  // namespace cudaemu

void AmpdEmuCopyAsync(void* dst, const void* src, int bytes) {
  using namespace cudaemu;
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 ||
      reinterpret_cast<uintptr_t>(src) % bytes != 0) {
    std::fprintf(stderr, "cuda emulator: %s: cp.async of %d bytes from %p to %p: misaligned\n",
                 g_kernel, bytes, src, dst);
    std::abort();
  }
  g_async_copies[g_current].push_back(AsyncCopy{dst, src, bytes, g_async_commits[g_current]});
}

void AmpdEmuCheckAligned(const void* p, int bytes, const char* what) {
  using namespace cudaemu;
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    std::fprintf(stderr,
                 "cuda emulator: %s: block (%u,%u,%u) thread %d: misaligned address: %s of %d "
                 "bytes at %p\n",
                 g_kernel, blockIdx.x, blockIdx.y, blockIdx.z, g_current, what, bytes, p);
    std::abort();
  }
}

void AmpdEmuCheckWmmaOperand(const void* p, unsigned ldm, int element_bytes, const char* what) {
  using namespace cudaemu;
  const unsigned multiple = element_bytes == 2 ? 8 : 4;
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ldm % multiple != 0) {
    std::fprintf(stderr,
                 "cuda emulator: %s: %s at %p with ldm %u: the pointer must be 256-bit aligned "
                 "and ldm a multiple of %u\n",
                 g_kernel, what, p, ldm, multiple);
    std::abort();
  }
}

void AmpdEmuCommitAsyncCopies() { ++cudaemu::g_async_commits[cudaemu::g_current]; }

void AmpdEmuWaitAsyncCopies(int n) {
  using namespace cudaemu;
  const int t = g_current;
  // Groups [0, commits - n) are complete after the wait.
  const int64_t complete_below = g_async_commits[t] - n;
  auto& q = g_async_copies[t];
  while (!q.empty() && q.front().group < complete_below) {
    std::memcpy(q.front().dst, q.front().src, static_cast<size_t>(q.front().bytes));
    q.pop_front();
  }
}

float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width) {
  return cudaemu::ShuffleXor(mask, v, lane_mask, width);
}
int __shfl_xor_sync(unsigned mask, int v, int lane_mask, int width) {
  return cudaemu::ShuffleXor(mask, v, lane_mask, width);
}

#define EMU_RETURN_IF_STICKY()                          \
  do {                                                  \
    if (St().sticky != cudaSuccess) return St().sticky; \
  } while (0)

// One device, or $AMPD_CUDA_EMU_DEVICES (1..16): a process still has one
// memory, whichever it picks. Enough to test code that places one rank per
// device, each process on "its" device (CUDA_VISIBLE_DEVICES as NCCL's
// launchers set it), the ranks meeting through the NCCL stand-in.
static int EmulatedDevices() {
  const char* v = std::getenv("AMPD_CUDA_EMU_DEVICES");
  const int n = v ? std::atoi(v) : 1;
  return n >= 1 && n <= 16 ? n : 1;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = EmulatedDevices();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  Lock lock(Mu());
  if (device < 0 || device >= EmulatedDevices()) {
    return Fail(cudaErrorInvalidValue, "no such device");
  }
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "ampd CUDA emulator (CPU)");
  prop->totalGlobalMem = St().capacity;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  return device >= 0 && device < EmulatedDevices() ? cudaSuccess
                                                   : Fail(cudaErrorInvalidValue, "no such device");
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  auto& s = St();
  *p = nullptr;
  if (bytes > s.capacity - s.device_in_use) {
    return Fail(cudaErrorMemoryAllocation, "out of emulated device memory");
  }
  void* mem = nullptr;
  if (posix_memalign(&mem, 256, std::max<size_t>(bytes, 1)) != 0) {
    return Fail(cudaErrorMemoryAllocation, "host allocation failed");
  }
  s.device[reinterpret_cast<uintptr_t>(mem)] = bytes;
  s.device_in_use += bytes;
  *p = mem;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (!p) return cudaSuccess;
  ++St().counters.host_waits;
  cudaemu::SynchronizeAll();  // cudaFree waits for the device
  auto& s = St();
  auto it = s.device.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.device.end())
    return Fail(cudaErrorInvalidDevicePointer, "cudaFree: not a cudaMalloc block");
  s.device_in_use -= it->second;
  s.device.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  *p = std::malloc(std::max<size_t>(bytes, 1));
  if (!*p) return Fail(cudaErrorMemoryAllocation, "host allocation failed");
  St().pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (!p) return cudaSuccess;
  ++St().counters.host_waits;
  cudaemu::SynchronizeAll();
  auto& s = St();
  auto it = s.pinned.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.pinned.end()) return Fail(cudaErrorInvalidValue, "cudaFreeHost: not pinned memory");
  s.pinned.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  St().events.push_back(std::make_unique<CUevent_st>());
  St().events.back()->timed = (flags & cudaEventDisableTiming) == 0;
  *e = St().events.back().get();
  return cudaSuccess;
}

// The event's memory stays until exit: records still queued may refer to it
// (CUDA, too, releases a destroyed event's resources once it completes).
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (!e) return Fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: null event");
  return cudaSuccess;
}

// As CUDA: both events timed and reached (else cudaErrorNotReady), and the
// host time between the moments the emulator ran their records.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (!start || !end || !ms) return Fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null");
  if (!start->timed || !end->timed) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event without timing");
  }
  if (start->generation == 0 || end->generation == 0 || start->pending || end->pending) {
    return Fail(cudaErrorNotReady, "cudaEventElapsedTime: an event not reached yet");
  }
  *ms = std::chrono::duration<float, std::milli>(end->reached - start->reached).count();
  return cudaSuccess;
}

// The work queued on s after this runs once e's latest record (now) has:
// when s runs, it first runs e's stream up to that record.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (!e) return Fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: null event");
  if (e->generation == 0 || !e->pending) return cudaSuccess;  // nothing to wait for
  CUstream_st* target = cudaemu::Resolve(s);
  CUstream_st* source = e->stream;
  const uint64_t generation = e->generation;
  if (source == target) return cudaSuccess;  // stream order covers it
  target->queue.push_back(CUstream_st::Item{[e, source, generation] {
                                              if (e->pending && e->generation == generation)
                                                cudaemu::RunQueue(source, e);
                                            },
                                            nullptr, 0});
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (!e) return Fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: null event");
  CUstream_st* st = cudaemu::Resolve(s);
  e->stream = st;
  e->pending = true;
  ++e->generation;
  st->queue.push_back(CUstream_st::Item{nullptr, e, e->generation});
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (!e) return Fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: null event");
  if (e->pending) {
    ++St().counters.host_waits;
    cudaemu::RunQueue(e->stream, e);
  }
  return St().sticky;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  St().streams.push_back(std::make_unique<CUstream_st>());
  *s = St().streams.back().get();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  ++St().counters.host_waits;
  if (s) {
    cudaemu::RunQueue(s, nullptr);
  } else {
    cudaemu::SynchronizeAll();  // the legacy default stream waits for all
  }
  return St().sticky;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  auto& streams = St().streams;
  for (auto it = streams.begin(); it != streams.end(); ++it) {
    if (it->get() == s) {
      cudaemu::RunQueue(s, nullptr);  // as CUDA: the work already queued still runs
      streams.erase(it);
      return cudaSuccess;
    }
  }
  return Fail(cudaErrorInvalidValue, "cudaStreamDestroy: not a stream");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  auto& st = St();
  if (bytes == 0) return cudaSuccess;
  const bool dst_dev = cudaemu::InRange(st.device, dst, bytes);
  const bool src_dev = cudaemu::InRange(st.device, src, bytes);
  CUstream_st* stream = cudaemu::Resolve(s);
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dst_dev || src_dev)
        return Fail(cudaErrorInvalidValue, "cudaMemcpyAsync H2D: bad pointers");
      if (cudaemu::InRange(st.pinned, src, bytes)) {
        // From pinned memory the copy reads the source when it runs.
        stream->queue.push_back({[=] { std::memcpy(dst, src, bytes); }, nullptr, 0});
      } else {
        // From pageable memory CUDA stages the bytes before returning.
        auto copy = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                        static_cast<const char*>(src) + bytes);
        stream->queue.push_back({[=] { std::memcpy(dst, copy->data(), bytes); }, nullptr, 0});
      }
      return cudaSuccess;
    case cudaMemcpyDeviceToHost:
      if (dst_dev || !src_dev)
        return Fail(cudaErrorInvalidValue, "cudaMemcpyAsync D2H: bad pointers");
      if (cudaemu::InRange(st.pinned, dst, bytes)) {
        stream->queue.push_back({[=] { std::memcpy(dst, src, bytes); }, nullptr, 0});
      } else {
        // Into pageable memory the call returns once the copy is done.
        ++st.counters.host_waits;
        cudaemu::RunQueue(stream, nullptr);
        std::memcpy(dst, src, bytes);
      }
      return cudaSuccess;
    case cudaMemcpyDeviceToDevice:
      if (!dst_dev || !src_dev)
        return Fail(cudaErrorInvalidValue, "cudaMemcpyAsync D2D: bad pointers");
      stream->queue.push_back({[=] { std::memmove(dst, src, bytes); }, nullptr, 0});
      return cudaSuccess;
    default:
      return Fail(cudaErrorInvalidValue, "cudaMemcpyAsync: kind not emulated");
  }
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  if (bytes == 0) return cudaSuccess;
  if (!cudaemu::InRange(St().device, p, bytes)) {
    return Fail(cudaErrorInvalidValue, "cudaMemsetAsync: not device memory");
  }
  cudaemu::Resolve(s)->queue.push_back({[=] { std::memset(p, value, bytes); }, nullptr, 0});
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Lock lock(Mu());
  EMU_RETURN_IF_STICKY();
  *total_bytes = St().capacity;
  *free_bytes = St().capacity - St().device_in_use;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  Lock lock(Mu());
  auto& s = St();
  if (s.sticky != cudaSuccess) return s.sticky;
  const cudaError_t e = s.last;
  s.last = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
  }
  return "unknown error";
}
