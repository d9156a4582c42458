#include "engine/cpu/vector_isa.h"

#include <atomic>

namespace ampd::engine::cpu {
namespace {

bool CpuHasAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's answer includes the OS check (XGETBV) for the AVX-512 state.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

std::atomic<bool> g_allowed{true};

}  // namespace

bool UseAvx512Kernels() {
  static const bool has = CpuHasAvx512();
  return has && g_allowed.load(std::memory_order_relaxed);
}

void AllowAvx512Kernels(bool allow) { g_allowed.store(allow, std::memory_order_relaxed); }

}  // namespace ampd::engine::cpu
