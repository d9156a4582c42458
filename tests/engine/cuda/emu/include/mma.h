#ifndef AMPD_TESTS_CUDA_EMU_MMA_H_
#define AMPD_TESTS_CUDA_EMU_MMA_H_

// nvcuda::wmma (CUDA's warp matrix API) for the CPU emulator, for the
// fragments the kernels use: 16x16x16 tiles of __half or __nv_bfloat16 with
// float accumulators.
//
// On a GPU the 32 threads of a warp call each function together and every
// thread holds an unspecified share of the tile (num_elements of it). Here
// every thread holds the whole tile and computes it alone (a store waits for
// the whole warp: see store_matrix_sync): the same result for code that uses
// only what the API documents (load, store, fill, mma,
// and element-wise operations applied alike to every element). A kernel that
// assumed a thread's elements were particular rows or columns would compute
// something else on a GPU, and is wrong there; this stand-in cannot tell.
// The products are exact in f32 and summed in k order; tensor cores sum in
// an order of their own, so device results may differ in the last bits.

#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

inline float ToFloat(float v) { return v; }
inline float ToFloat(__half v) { return __half2float(v); }
inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// x[r * 16 + c] is element (r, c) of the tile.
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");
  static constexpr int num_elements = 256;
  T x[num_elements];
};

// Loads and stores check CUDA's documented requirements
// (AmpdEmuCheckWmmaOperand in cuda_runtime.h).
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  ::AmpdEmuCheckWmmaOperand(p, ldm, sizeof(T), "load_matrix_sync");
  constexpr bool kColumns = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = kColumns ? p[c * ldm + r] : p[r * ldm + c];
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  ::AmpdEmuCheckWmmaOperand(p, ldm, sizeof(float), "load_matrix_sync");
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r * 16 + c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
    }
  }
}

// The warp's threads all store the same tile, so each waits for the others
// first (their loads of the same memory come before any store, as one
// collective operation on a GPU) and after (no thread reads it half written).
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  ::AmpdEmuCheckWmmaOperand(p, ldm, sizeof(float), "store_matrix_sync");
  __syncwarp();
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * 16 + c];
    }
  }
  __syncwarp();
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T v) {
  for (T& e : f.x) e = v;
}

template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float s = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k) s += ToFloat(a.x[i * 16 + k]) * ToFloat(b.x[k * 16 + j]);
      out[i * 16 + j] = s;
    }
  }
  for (int e = 0; e < 256; ++e) d.x[e] = out[e];
}

}  // namespace nvcuda::wmma

#endif  // AMPD_TESTS_CUDA_EMU_MMA_H_
