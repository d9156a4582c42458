#ifndef AMPD_ENGINE_CORE_RNG_H_
#define AMPD_ENGINE_CORE_RNG_H_

// A small seeded generator (splitmix64) whose output is the same on every
// platform and standard library, unlike std:: distributions: initial weights
// and therefore whole runs are reproducible from the seed alone.

#include <cstdint>

namespace ampd::engine::core {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t NextU64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits.
  float NextFloat() { return static_cast<float>(NextU64() >> 40) * 0x1.0p-24f; }
  float Uniform(float lo, float hi) { return lo + (hi - lo) * NextFloat(); }
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

}  // namespace ampd::engine::core

#endif  // AMPD_ENGINE_CORE_RNG_H_
