#ifndef AMPD_TESTS_ENGINE_RANDOM_VALUES_H_
#define AMPD_TESTS_ENGINE_RANDOM_VALUES_H_

// Seeded normal values for kernel tests (inputs, upstream gradients).

#include <cstdint>
#include <random>
#include <vector>

namespace ampd::engine::testing {

// n draws of N(0, sd^2) from a Mersenne Twister seeded with `seed`.
inline std::vector<double> RandomValues(int64_t n, uint32_t seed, double sd = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0, sd);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

}  // namespace ampd::engine::testing

#endif  // AMPD_TESTS_ENGINE_RANDOM_VALUES_H_
