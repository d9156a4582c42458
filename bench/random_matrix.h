#ifndef AMPD_BENCH_RANDOM_MATRIX_H_
#define AMPD_BENCH_RANDOM_MATRIX_H_

// Seeded N(0, 1) matrices for the kernel benchmarks' inputs.

#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::bench {

// A [rows, cols] tensor of `dtype` with N(0, 1) values drawn from a seeded
// Mersenne Twister (rounded once into dtype).
inline engine::Tensor RandomMatrix(int64_t rows, int64_t cols, engine::DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(rows * cols);
  for (float& x : v) x = normal(rng);
  return engine::Tensor::FromVector(v, {rows, cols}, dtype);
}

}  // namespace ampd::bench

#endif  // AMPD_BENCH_RANDOM_MATRIX_H_
