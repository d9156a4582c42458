#include "engine/cpu/vector_isa.h"

#include <atomic>

#include "engine/cpu/dropout_mask.h"

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

bool CpuHasAvx512Dq() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512dq");
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

bool UseAvx512DropoutMask() {
  static const bool has_dq = CpuHasAvx512Dq();
  return has_dq && UseAvx512Kernels();
}

void AllowAvx512Kernels(bool allow) { g_allowed.store(allow, std::memory_order_relaxed); }

}  // namespace ampd::engine::cpu
