// The CPU backend: Reductions, deterministic whatever the thread count (fixed chunks, fixed order).

#include "engine/backend/kernels/reductions.h"

#include "engine/cpu/avx512_math.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

using backend::KernelMethod;
using backend::SumAllKernel;
using backend::SumRowsKernel;

namespace {

#ifdef AMPD_HAS_AVX512_KERNELS
// out[c0, c1) += the sums over `rows` rows of columns [c0, c1) (a multiple
// of 16 wide) of a [rows, cols] f32 or bf16 matrix, each column in row order
// in double: the portable loop's sums bit for bit. The rows go by in blocks
// of kSumRowBlock, all the range's columns for each block, so memory is read
// in a few sequential streams; a column slice read down all the rows at a
// row stride stalled on every row's load (prefetchers stop at page ends).
constexpr int64_t kSumRowBlock = 8;

template <bool kBf16>
AMPD_AVX512 void SumColumnsAvx512(const void* base, int64_t rows, int64_t cols, int64_t c0,
                                  int64_t c1, double* out) {
  using T = std::conditional_t<kBf16, uint16_t, float>;
  const T* x = static_cast<const T*>(base);
  for (int64_t r0 = 0; r0 < rows; r0 += kSumRowBlock) {
    const int64_t r1 = std::min(rows, r0 + kSumRowBlock);
    for (int64_t c = c0; c < c1; c += 16) {
      __m512d lo = _mm512_loadu_pd(out + c), hi = _mm512_loadu_pd(out + c + 8);
      for (int64_t r = r0; r < r1; ++r) {
        const __m512 v = Load16<kBf16>(x + r * cols + c);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        hi = _mm512_add_pd(
            hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
      }
      _mm512_storeu_pd(out + c, lo);
      _mm512_storeu_pd(out + c + 8, hi);
    }
  }
}

// ChunkedSum's squared sums of an f32 tensor, chunk for chunk and bit for
// bit (Accumulate8<true>: lane j of a chunk's accumulator takes the chunk's
// elements j, j + 8, ...; x * x is exact in double, so a fused multiply-add
// rounds as the product-then-sum does), with kLockstep chunks advancing
// together: one chunk's sum is a chain of dependent additions, four such
// chains keep the adder busy (about 3x faster here).
constexpr int64_t kLockstep = 4;

// Accumulate8<true>'s eight sums of one chunk (len values), one chain.
AMPD_AVX512 void ChunkSquares(const float* x, int64_t len, double* a) {
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    acc = _mm512_fmadd_pd(v, v, acc);
  }
  _mm512_storeu_pd(a, acc);
  for (; i < len; ++i) {
    const double v = x[i];
    a[i % 8] += v * v;
  }
}

// partial[c] for the chunks [c0, c0 + count) of x (n values): kLockstep
// full chunks in lockstep, else (the tensor's last group) one at a time.
AMPD_AVX512 void SquareSumsAvx512(const float* x, int64_t n, int64_t c0, int64_t count,
                                  double* partial) {
  double a[kLockstep][8];
  const int64_t begin = c0 * kSumChunk;
  if (count == kLockstep && n - begin >= kLockstep * kSumChunk) {
    __m512d acc[kLockstep];
    for (int64_t k = 0; k < kLockstep; ++k) acc[k] = _mm512_setzero_pd();
    for (int64_t i = 0; i < kSumChunk; i += 8) {
#pragma GCC unroll 4
      for (int64_t k = 0; k < kLockstep; ++k) {
        const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + begin + k * kSumChunk + i));
        acc[k] = _mm512_fmadd_pd(v, v, acc[k]);
      }
    }
    for (int64_t k = 0; k < kLockstep; ++k) _mm512_storeu_pd(a[k], acc[k]);
  } else {
    for (int64_t k = 0; k < count; ++k) {
      const int64_t start = begin + k * kSumChunk;
      ChunkSquares(x + start, std::min(kSumChunk, n - start), a[k]);
    }
  }
  for (int64_t k = 0; k < count; ++k) {
    const double* s = a[k];
    partial[c0 + k] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  }
}
#endif

}  // namespace

Tensor CpuBackendImpl::SumAll(const Tensor& x, DType out) {
  // Accumulate in double: a long f32 sum would otherwise drift with length.
  if (UsesDouble(x)) {
    const double* xv = x.data<double>();
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += xv[i];
    return Tensor::Full({}, out, s);
  }
  const double s = ChunkedSum(x.numel(), [&](int64_t begin, int64_t len, float* buf, double* acc) {
    Accumulate8<false>(LoadBlock(x, begin, len, buf), len, acc);
  });
  return Tensor::Full({}, out, s);
}

Tensor CpuBackendImpl::SumRows(const Tensor& x, DType out) {
  const int64_t cols = x.dim(-1), rows = Rows(x);
  std::vector<double> s(cols, 0.0);
  if (UsesDouble(x)) {
    const double* xv = x.data<double>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) s[c] += xv[r * cols + c];
    }
  } else {
    // Each column is summed over the rows in order, in double, by the one
    // thread that owns its slice of columns.
#ifdef AMPD_HAS_AVX512_KERNELS
    const bool vector = UseAvx512Kernels() && cols % 16 == 0 &&
                        (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16);
#endif
    ForColumnRanges(rows, cols, [&](int64_t c0, int64_t c1) {
#ifdef AMPD_HAS_AVX512_KERNELS
      if (vector) {
        return x.dtype() == DType::kBF16
                   ? SumColumnsAvx512<true>(x.raw(), rows, cols, c0, c1, s.data())
                   : SumColumnsAvx512<false>(x.raw(), rows, cols, c0, c1, s.data());
      }
#endif
      std::vector<float> row_buf(c1 - c0);
      double* __restrict sp = s.data() + c0;
      for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict xr = LoadBlock(x, r * cols + c0, c1 - c0, row_buf.data());
        AMPD_SIMD
        for (int64_t c = 0; c < c1 - c0; ++c) sp[c] += xr[c];
      }
    });
  }
  return Tensor::FromDoubles(s, {cols}, out);
}

double CpuBackendImpl::SumOfSquares(const std::vector<Tensor>& tensors) {
  double s = 0;
  for (const Tensor& t : tensors) {
    if (UsesDouble(t)) {
      const double* v = t.data<double>();
      for (int64_t i = 0; i < t.numel(); ++i) s += v[i] * v[i];
      continue;
    }
#ifdef AMPD_HAS_AVX512_KERNELS
    if (t.dtype() == DType::kF32 && UseAvx512Kernels()) {
      const int64_t n = t.numel(), chunks = (n + kSumChunk - 1) / kSumChunk;
      std::vector<double> partial(chunks, 0.0);
      ParallelFor((chunks + kLockstep - 1) / kLockstep, n >= kParallelMin, [&](int64_t g) {
        SquareSumsAvx512(t.data<float>(), n, g * kLockstep,
                         std::min(kLockstep, chunks - g * kLockstep), partial.data());
      });
      double sum = 0;  // ChunkedSum's order
      for (double p : partial) sum += p;
      s += sum;
      continue;
    }
#endif
    s += ChunkedSum(t.numel(), [&](int64_t begin, int64_t len, float* buf, double* acc) {
      Accumulate8<true>(LoadBlock(t, begin, len, buf), len, acc);
    });
  }
  return s;
}

AMPD_REGISTER_KERNEL(SumAllKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::SumAll>::Call);
AMPD_REGISTER_KERNEL(SumRowsKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::SumRows>::Call);

}  // namespace ampd::engine::cpu
