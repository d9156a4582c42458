#ifndef AMPD_ENGINE_CPU_GEMM_H_
#define AMPD_ENGINE_CPU_GEMM_H_

// Small dense GEMMs for the CPU backend's own kernels (attention's
// backward), through the same per-thread cache of oneDNN matmul primitives
// as the Matmul kernel (matmul.cc). Called inside an OpenMP parallel region,
// oneDNN runs the GEMM on the calling thread.

#include <cstdint>

namespace ampd::engine::cpu {

// c[m x n] = op(a) op(b), row-major and dense: op(a) is a [m x k] (stored
// [k x m] when trans_a), op(b) is b [k x n] (stored [n x k] when trans_b).
void GemmF32(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
             bool trans_a, bool trans_b);

// The same with bf16 operands (raw bits) and an f32 result, by the route in
// effect (bf16_gemm_route.h): oneDNN's bf16 matmul (AMX or AVX512-BF16), or
// both operands widened into this thread's scratch and GemmF32. The
// products of bf16 values are exact in f32; the sums are f32.
void GemmBf16(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k,
              bool trans_a, bool trans_b);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_GEMM_H_
