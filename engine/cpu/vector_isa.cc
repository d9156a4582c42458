#include "engine/cpu/vector_isa.h"

#include <atomic>

#include "engine/cpu/dropout_mask.h"

namespace ampd::engine::cpu {
namespace {

// What the CPU has of AVX-512 (libgcc's answer includes the OS check,
// XGETBV, for the AVX-512 state).
struct Avx512Features {
  bool f = false, dq = false;
};
Avx512Features ProbeAvx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return {__builtin_cpu_supports("avx512f") != 0, __builtin_cpu_supports("avx512dq") != 0};
#else
  return {};
#endif
}

std::atomic<bool> g_allowed{true};

}  // namespace

bool UseAvx512Kernels() {
  static const bool has = ProbeAvx512().f;
  return has && g_allowed.load(std::memory_order_relaxed);
}

bool UseAvx512DropoutMask() {
  static const bool has_dq = ProbeAvx512().dq;
  return has_dq && UseAvx512Kernels();
}

void AllowAvx512Kernels(bool allow) { g_allowed.store(allow, std::memory_order_relaxed); }

}  // namespace ampd::engine::cpu
