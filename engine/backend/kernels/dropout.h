#ifndef AMPD_ENGINE_BACKEND_KERNELS_DROPOUT_H_
#define AMPD_ENGINE_BACKEND_KERNELS_DROPOUT_H_

// Dropout's kernel, per device (kernel_registry.h). Inverted dropout with a
// counter-based RNG: element i is kept iff hash(seed, i) >= p, and kept
// values are scaled by 1/(1-p). The mask is implied by (seed, p); nothing is
// stored, and the backward is the same kernel applied to the gradient.

#include <cmath>
#include <cstdint>

#include "engine/backend/kernel_registry.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

struct DropoutKernel {
  static constexpr const char* kName = "dropout";
  static constexpr OpId kOps[] = {OpId::kDropout};
  using Fn = Tensor (*)(const Tensor& x, double p, uint64_t seed);
};

// The per-element hash (the same on every device).
inline uint64_t DropoutHash(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// The seed whose mask at index i is `seed`'s at i + offset:
// DropoutHash(DropoutSeedAt(s, k), i) == DropoutHash(s, i + k), as the hash
// mixes seed + G (index + 1). A data-parallel rank's slice of a batch takes
// the whole batch's mask this way (ops/dropout.h's DropoutShardScope).
inline uint64_t DropoutSeedAt(uint64_t seed, uint64_t offset) {
  return seed + 0x9E3779B97F4A7C15ull * offset;
}
inline bool DropoutKeep(uint64_t seed, uint64_t index, double p) {
  return static_cast<double>(DropoutHash(seed, index) >> 11) * 0x1.0p-53 >= p;
}
// DropoutKeep's rule in integers: kept iff DropoutHash(seed, index) >> 11 >=
// DropoutThreshold(p), as (h >> 11) * 2^-53 >= p <=> (h >> 11) >=
// ceil(p * 2^53), both sides exact. 0 for p = 0 (everything kept).
inline uint64_t DropoutThreshold(double p) {
  return static_cast<uint64_t>(std::ceil(p * 0x1.0p53));
}

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_DROPOUT_H_
