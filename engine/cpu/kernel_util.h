#ifndef AMPD_ENGINE_CPU_KERNEL_UTIL_H_
#define AMPD_ENGINE_CPU_KERNEL_UTIL_H_

// The CPU backend: oneDNN for matmul, plain loops for the rest. Every kernel
// reads its inputs widened to a compute type C (float, or double for f64),
// computes, and rounds once on store.
//
// The f32 compute paths stream through tensors a block at a time: an f32
// input is read in place, an f16/bf16 one is widened into a small buffer, and
// results go straight into an f32 output or through a small buffer that is
// rounded once into an f16/bf16 one. Loops over large tensors are split over
// oneDNN's OpenMP threads; element i is computed the same way whichever thread
// runs it, and reductions combine fixed-size chunks in a fixed order, so
// results do not depend on the thread count.
//
// This header holds what the CPU kernel files share (engine/cpu/*.cc, one per
// kernel family): block streaming, the OpenMP split, widened views, the
// elementwise op switches and deterministic chunked sums. Internal to
// engine/cpu.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/backend/backend.h"
#include "engine/core/half.h"

namespace ampd::engine::cpu {

// Asks for a vectorised loop (no loop-carried dependencies; element i is
// computed exactly as the scalar loop would, so results do not change).
#ifdef _OPENMP
#define AMPD_SIMD _Pragma("omp simd")
#else
#define AMPD_SIMD
#endif

// Elements per streamed block: a few of these buffers stay in L1.
constexpr int64_t kBlock = 2048;
// Below this many elements a loop stays on the calling thread.
constexpr int64_t kParallelMin = int64_t{1} << 17;

// ThreadSanitizer cannot see libgomp's synchronisation, so it would report
// the workers' disjoint writes as races: loops stay serial under it.
#if defined(__SANITIZE_THREAD__)
#define AMPD_SERIAL_LOOPS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AMPD_SERIAL_LOOPS 1
#endif
#endif

// Threads a parallel loop started here would use (1 without OpenMP).
inline int64_t PoolThreads() {
#if defined(_OPENMP) && !defined(AMPD_SERIAL_LOOPS)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Runs fn(0) ... fn(tasks - 1), on oneDNN's OpenMP thread pool when `parallel`.
template <typename F>
void ParallelFor(int64_t tasks, bool parallel, const F& fn) {
#if defined(_OPENMP) && !defined(AMPD_SERIAL_LOOPS)
  if (parallel && tasks > 1 && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
#else
  (void)parallel;
#endif
  for (int64_t t = 0; t < tasks; ++t) fn(t);
}

// fn(begin, len) over [0, n) in blocks of kBlock.
template <typename F>
void ForBlocks(int64_t n, const F& fn) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  ParallelFor(blocks, n >= kParallelMin, [&](int64_t b) {
    const int64_t begin = b * kBlock;
    fn(begin, std::min(kBlock, n - begin));
  });
}

// fn(r) for each row r of a [rows, cols] matrix, in chunks of whole rows
// (about kBlock elements each) across threads when the matrix is large.
template <typename F>
void ForRowChunks(int64_t rows, int64_t cols, const F& fn) {
  const int64_t per = std::max<int64_t>(1, kBlock / std::max<int64_t>(cols, 1));
  ParallelFor((rows + per - 1) / per, rows * cols >= kParallelMin, [&](int64_t t) {
    const int64_t end = std::min(rows, (t + 1) * per);
    for (int64_t r = t * per; r < end; ++r) fn(r);
  });
}

// fn(c0, c1) for contiguous ranges [c0, c1) of a [rows, cols] matrix's
// columns, one range per thread when the matrix is large (each a multiple of
// 16 columns but the last): a column reduction over the rows in row order
// gives the same sums however the columns are shared out.
template <typename F>
void ForColumnRanges(int64_t rows, int64_t cols, const F& fn) {
  const int64_t groups = (cols + 15) / 16;
  int64_t parts = 1;
#if defined(_OPENMP) && !defined(AMPD_SERIAL_LOOPS)
  if (rows * cols >= kParallelMin && !omp_in_parallel()) parts = omp_get_max_threads();
#endif
  parts = std::max<int64_t>(1, std::min(parts, groups));
  ParallelFor(parts, parts > 1, [&](int64_t t) {
    const int64_t c0 = std::min(cols, groups * t / parts * 16);
    const int64_t c1 = std::min(cols, groups * (t + 1) / parts * 16);
    if (c0 < c1) fn(c0, c1);
  });
}

// Elements [begin, begin + len) of t as floats: a pointer into t when it is
// f32, otherwise converted into buf (as Tensor::ToFloats would).
inline const float* LoadBlock(const Tensor& t, int64_t begin, int64_t len, float* buf) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>() + begin;
    case DType::kF16:
      core::ConvertF16ToF32(t.data<uint16_t>() + begin, buf, len);
      break;
    case DType::kBF16:
      core::ConvertBF16ToF32(t.data<uint16_t>() + begin, buf, len);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < len; ++i) buf[i] = static_cast<float>(t.data<double>()[begin + i]);
      break;
    case DType::kU8:  // storage only: never an op's input (see core/dtype.h)
      for (int64_t i = 0; i < len; ++i) buf[i] = t.data<uint8_t>()[begin + i];
      break;
  }
  return buf;
}

// Where a kernel writes its float results for block `begin` of t: into t
// itself when it is f32, otherwise into buf (then StoreBlock rounds them).
inline float* DestBlock(const Tensor& t, int64_t begin, float* buf) {
  return t.dtype() == DType::kF32 ? t.data<float>() + begin : buf;
}

// Rounds float results once into t's dtype (nothing to do when they were
// written in place).
inline void StoreBlock(const float* src, const Tensor& t, int64_t begin, int64_t len) {
  switch (t.dtype()) {
    case DType::kF32:
      if (src != t.data<float>() + begin) {
        std::memcpy(t.data<float>() + begin, src, len * sizeof(float));
      }
      break;
    case DType::kF16:
      core::ConvertF32ToF16(src, t.data<uint16_t>() + begin, len);
      break;
    case DType::kBF16:
      core::ConvertF32ToBF16(src, t.data<uint16_t>() + begin, len);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < len; ++i) t.data<double>()[begin + i] = src[i];
      break;
    case DType::kU8:  // storage only
      for (int64_t i = 0; i < len; ++i) {
        t.data<uint8_t>()[begin + i] =
            static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, std::nearbyint(src[i]))));
      }
      break;
  }
}

// A writable buffer of C that becomes a tensor of `dtype`, rounding once.
// A read-only view of a tensor's values as C, copying only when the storage
// type differs from C. (Row-wise kernels; elementwise ones stream blocks.)
// Float copies are converted block by block across threads.
template <typename C>
class Values {
 public:
  explicit Values(const Tensor& t) {
    if constexpr (std::is_same_v<C, float>) {
      if (t.dtype() == DType::kF32) {
        ptr_ = t.data<float>();
        return;
      }
      owned_.reset(new float[t.numel()]);  // no zero fill: every value is written
      float* dst = owned_.get();
      ForBlocks(t.numel(), [&](int64_t begin, int64_t len) {
        const float* src = LoadBlock(t, begin, len, dst + begin);
        if (src != dst + begin) std::memcpy(dst + begin, src, len * sizeof(float));
      });
      ptr_ = dst;
    } else {
      if (t.dtype() == DType::kF64) {
        ptr_ = t.data<double>();
        return;
      }
      doubles_ = t.ToDoubles();
      ptr_ = doubles_.data();
    }
  }
  const C* data() const { return ptr_; }
  C operator[](int64_t i) const { return ptr_[i]; }

 private:
  const C* ptr_ = nullptr;
  std::unique_ptr<float[]> owned_;
  std::vector<double> doubles_;
};

template <typename C>
class Output {
 public:
  Output(const std::vector<int64_t>& shape, DType dtype)
      : tensor_(Tensor::Uninitialized(shape, dtype)) {
    if (Native()) {
      ptr_ = tensor_.data<C>();
    } else {
      owned_.reset(new C[tensor_.numel()]);  // no zero fill: kernels write every value
      ptr_ = owned_.get();
    }
  }
  C* data() { return ptr_; }
  C& operator[](int64_t i) { return ptr_[i]; }
  Tensor Finish() {
    if (!Native()) {
      const int64_t n = tensor_.numel();
      if constexpr (std::is_same_v<C, float>) {
        const float* src = owned_.get();
        ForBlocks(
            n, [&](int64_t begin, int64_t len) { StoreBlock(src + begin, tensor_, begin, len); });
      } else {
        // As before: double -> float, then float -> the storage type.
        float buf[kBlock];
        for (int64_t begin = 0; begin < n; begin += kBlock) {
          const int64_t len = std::min(kBlock, n - begin);
          for (int64_t i = 0; i < len; ++i) buf[i] = static_cast<float>(owned_[begin + i]);
          StoreBlock(buf, tensor_, begin, len);
        }
      }
    }
    return tensor_;
  }

 private:
  bool Native() const {
    return std::is_same_v<C, float> ? tensor_.dtype() == DType::kF32
                                    : tensor_.dtype() == DType::kF64;
  }
  Tensor tensor_;
  C* ptr_ = nullptr;
  std::unique_ptr<C[]> owned_;
};

inline bool UsesDouble(const Tensor& t) { return t.dtype() == DType::kF64; }

inline int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

template <typename C>
C ApplyUnary(OpId op, C x) {
  switch (op) {
    case OpId::kRelu:
      return x > 0 ? x : C(0);
    case OpId::kGelu:
      return C(0.5) * x * (C(1) + std::erf(x * C(M_SQRT1_2)));
    case OpId::kGeluTanh:
      // GPT-2's 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as
      // x * sigmoid(2u): the same function, one exp instead of libm's tanh.
      return x / (C(1) + std::exp(C(-2 * 0.7978845608028654) * (x + C(0.044715) * x * x * x)));
    case OpId::kExp:
      return std::exp(x);
    case OpId::kLog:
      return std::log(x);
    case OpId::kNeg:
      return -x;
    case OpId::kSquare:
      return x * x;
    default:  // not unary: WithUnaryOp refuses it before any loop runs
      return std::numeric_limits<C>::quiet_NaN();
  }
}

template <typename C>
C UnaryDerivative(OpId op, C x) {
  switch (op) {
    case OpId::kRelu:
      return x > 0 ? C(1) : C(0);
    case OpId::kGelu: {
      C cdf = C(0.5) * (C(1) + std::erf(x * C(M_SQRT1_2)));
      C pdf = std::exp(C(-0.5) * x * x) * C(0.3989422804014327);
      return cdf + x * pdf;
    }
    case OpId::kGeluTanh: {  // s + 2 x s (1 - s) du/dx with s = sigmoid(2u)
      const C s =
          C(1) / (C(1) + std::exp(C(-2 * 0.7978845608028654) * (x + C(0.044715) * x * x * x)));
      return s +
             C(2) * x * s * (C(1) - s) * C(0.7978845608028654) * (C(1) + C(3 * 0.044715) * x * x);
    }
    case OpId::kExp:
      return std::exp(x);
    case OpId::kLog:
      return C(1) / x;
    case OpId::kNeg:
      return C(-1);
    case OpId::kSquare:
      return C(2) * x;
    default:
      return std::numeric_limits<C>::quiet_NaN();
  }
}

template <typename C>
C ApplyBinary(OpId op, C a, C b) {
  switch (op) {
    case OpId::kAdd:
      return a + b;
    case OpId::kSub:
      return a - b;
    case OpId::kMul:
      return a * b;
    default:  // not binary: WithBinaryOp refuses it
      return std::numeric_limits<C>::quiet_NaN();
  }
}

// Ops reach Unary/Binary only from engine/ops, each with its own family: any
// other op here is a bug in the engine, not bad input.
[[noreturn]] inline void NotInFamily(OpId op, const char* family) {
  std::fprintf(stderr, "ampd: op %s is not a %s op of the CPU backend\n", ops::OpName(op), family);
  std::abort();
}

// Calls body(std::integral_constant<Op, op>) so that the op is a compile-time
// constant inside the (then vectorisable) loops of body.
template <typename F>
void WithUnaryOp(OpId op, const F& body) {
  switch (op) {
    case OpId::kRelu:
      return body(std::integral_constant<OpId, OpId::kRelu>());
    case OpId::kGelu:
      return body(std::integral_constant<OpId, OpId::kGelu>());
    case OpId::kGeluTanh:
      return body(std::integral_constant<OpId, OpId::kGeluTanh>());
    case OpId::kExp:
      return body(std::integral_constant<OpId, OpId::kExp>());
    case OpId::kLog:
      return body(std::integral_constant<OpId, OpId::kLog>());
    case OpId::kNeg:
      return body(std::integral_constant<OpId, OpId::kNeg>());
    case OpId::kSquare:
      return body(std::integral_constant<OpId, OpId::kSquare>());
    default:
      NotInFamily(op, "unary");
  }
}

template <typename F>
void WithBinaryOp(OpId op, const F& body) {
  switch (op) {
    case OpId::kAdd:
      return body(std::integral_constant<OpId, OpId::kAdd>());
    case OpId::kSub:
      return body(std::integral_constant<OpId, OpId::kSub>());
    case OpId::kMul:
      return body(std::integral_constant<OpId, OpId::kMul>());
    default:
      NotInFamily(op, "binary");
  }
}

// A sum over [0, n) in double, deterministic whatever the thread count: fixed
// chunks, each fed block by block to load_block(begin, len, float_buf, acc),
// which adds into eight interleaved accumulators; those are combined in a
// fixed order, and the chunk sums added in order.
constexpr int64_t kSumChunk = 16 * kBlock;

template <typename Load>
double ChunkedSum(int64_t n, const Load& load_block) {
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(chunks, 0.0);
  ParallelFor(chunks, n >= kParallelMin, [&](int64_t c) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float buf[kBlock];
    const int64_t chunk_end = std::min(n, (c + 1) * kSumChunk);
    for (int64_t begin = c * kSumChunk; begin < chunk_end; begin += kBlock) {
      const int64_t len = std::min(kBlock, chunk_end - begin);
      load_block(begin, len, buf, acc);
    }
    partial[c] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  });
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

// acc[i % 8] += v[i] (square: v[i] * v[i]), in double.
template <bool kSquare>
void Accumulate8(const float* v, int64_t len, double* acc) {
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double x = v[i + j];
      acc[j] += kSquare ? x * x : x;
    }
  }
  for (; i < len; ++i) {
    const double x = v[i];
    acc[i % 8] += kSquare ? x * x : x;
  }
}

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_KERNEL_UTIL_H_
