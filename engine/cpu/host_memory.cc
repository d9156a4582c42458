#include "engine/cpu/host_memory.h"

#include <malloc.h>

namespace ampd::engine::cpu {

void KeepHostMemoryMapped() {
  mallopt(M_MMAP_MAX, 0);
  // The heap's free top is given back only beyond 2 GiB (mallopt takes an
  // int); between jobs ReturnFreeHostMemory gives back the rest.
  mallopt(M_TRIM_THRESHOLD, static_cast<int>((1u << 31) - 1));
}

void ReturnFreeHostMemory() { malloc_trim(0); }

}  // namespace ampd::engine::cpu
