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

#include "engine/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/core/half.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ampd::engine {
namespace {

// A read-only view of a tensor's values as C, copying only when the storage
// type differs from C. (Row-wise kernels; elementwise ones stream blocks.)
template <typename C>
class Values {
 public:
  explicit Values(const Tensor& t) {
    if constexpr (std::is_same_v<C, float>) {
      if (t.dtype() == DType::kF32) {
        ptr_ = t.data<float>();
        return;
      }
      owned_ = t.ToFloats();
    } else {
      if (t.dtype() == DType::kF64) {
        ptr_ = t.data<double>();
        return;
      }
      owned_ = t.ToDoubles();
    }
    ptr_ = owned_.data();
  }
  const C* data() const { return ptr_; }
  C operator[](int64_t i) const { return ptr_[i]; }

 private:
  const C* ptr_ = nullptr;
  std::vector<C> owned_;
};

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

// Elements [begin, begin + len) of t as floats: a pointer into t when it is
// f32, otherwise converted into buf (as Tensor::ToFloats would).
const float* LoadBlock(const Tensor& t, int64_t begin, int64_t len, float* buf) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>() + begin;
    case DType::kF16:
      ConvertF16ToF32(t.data<uint16_t>() + begin, buf, len);
      break;
    case DType::kBF16:
      ConvertBF16ToF32(t.data<uint16_t>() + begin, buf, len);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < len; ++i) buf[i] = static_cast<float>(t.data<double>()[begin + i]);
      break;
  }
  return buf;
}

// Where a kernel writes its float results for block `begin` of t: into t
// itself when it is f32, otherwise into buf (then StoreBlock rounds them).
float* DestBlock(const Tensor& t, int64_t begin, float* buf) {
  return t.dtype() == DType::kF32 ? t.data<float>() + begin : buf;
}

// Rounds float results once into t's dtype (nothing to do when they were
// written in place).
void StoreBlock(const float* src, const Tensor& t, int64_t begin, int64_t len) {
  switch (t.dtype()) {
    case DType::kF32:
      if (src != t.data<float>() + begin) {
        std::memcpy(t.data<float>() + begin, src, len * sizeof(float));
      }
      break;
    case DType::kF16:
      ConvertF32ToF16(src, t.data<uint16_t>() + begin, len);
      break;
    case DType::kBF16:
      ConvertF32ToBF16(src, t.data<uint16_t>() + begin, len);
      break;
    case DType::kF64:
      for (int64_t i = 0; i < len; ++i) t.data<double>()[begin + i] = src[i];
      break;
  }
}

// A writable buffer of C that becomes a tensor of `dtype`, rounding once.
template <typename C>
class Output {
 public:
  Output(const std::vector<int64_t>& shape, DType dtype)
      : tensor_(Tensor::Uninitialized(shape, dtype)) {
    if (Native()) {
      ptr_ = tensor_.data<C>();
    } else {
      owned_.resize(tensor_.numel());
      ptr_ = owned_.data();
    }
  }
  C* data() { return ptr_; }
  C& operator[](int64_t i) { return ptr_[i]; }
  Tensor Finish() {
    if (!Native()) {
      const int64_t n = tensor_.numel();
      if constexpr (std::is_same_v<C, float>) {
        StoreBlock(owned_.data(), tensor_, 0, n);
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
  std::vector<C> owned_;
};

bool UsesDouble(const Tensor& t) { return t.dtype() == DType::kF64; }

int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

template <typename C>
C ApplyUnary(OpId op, C x) {
  switch (op) {
    case OpId::kRelu:
      return x > 0 ? x : C(0);
    case OpId::kGelu:
      return C(0.5) * x * (C(1) + std::erf(x * C(M_SQRT1_2)));
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
[[noreturn]] void NotInFamily(OpId op, const char* family) {
  std::fprintf(stderr, "ampd: op %s is not a %s op of the CPU backend\n", OpName(op), family);
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

// oneDNN matmul primitives, cached per shape and layout: creating a primitive
// JIT-compiles a kernel, which would otherwise dominate small steps. Each
// thread keeps its own cache (primitive, memory objects and stream made once),
// so a call takes no lock and only swaps the buffer pointers; a second thread
// asking for a known shape gets the kernel from oneDNN's primitive cache.
class DnnlMatmul {
 public:
  static DnnlMatmul& Get() {
    static thread_local DnnlMatmul instance;
    return instance;
  }

  // a, b, c are raw buffers of type dt (c of dt_out).
  void Run(dnnl::memory::data_type dt, dnnl::memory::data_type dt_out, const void* a, const void* b,
           void* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
    using tag = dnnl::memory::format_tag;
    auto key =
        std::make_tuple(static_cast<int>(dt), static_cast<int>(dt_out), m, n, k, trans_a, trans_b);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      const dnnl::engine& eng = Engine();
      const dnnl::memory::desc ad({m, k}, dt, trans_a ? tag::ba : tag::ab);
      const dnnl::memory::desc bd({k, n}, dt, trans_b ? tag::ba : tag::ab);
      const dnnl::memory::desc cd({m, n}, dt_out, tag::ab);
      Entry e;
      e.prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
      e.a = dnnl::memory(ad, eng, DNNL_MEMORY_NONE);
      e.b = dnnl::memory(bd, eng, DNNL_MEMORY_NONE);
      e.c = dnnl::memory(cd, eng, DNNL_MEMORY_NONE);
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.a.set_data_handle(const_cast<void*>(a));
    e.b.set_data_handle(const_cast<void*>(b));
    e.c.set_data_handle(c);
    e.prim.execute(stream_, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
    stream_.wait();
  }

 private:
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory a, b, c;
  };
  static const dnnl::engine& Engine() {
    static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
    return *engine;
  }
  DnnlMatmul() : stream_(Engine()) {}
  dnnl::stream stream_;
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool>, Entry> cache_;
};

class CpuBackendImpl final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu"; }
  // The reference backend: every op lands here first, with its gradient check.
  bool HasKernel(OpId) const override { return true; }

  Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out) override {
    const int64_t m = trans_a ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a ? a.dim(0) : a.dim(1);
    const int64_t n = trans_b ? b.dim(0) : b.dim(1);
    using dt = dnnl::memory::data_type;
    if (a.dtype() == DType::kF64) {
      Values<double> av(a), bv(b);
      Output<double> c({m, n}, out);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) {
            s += av[trans_a ? p * m + i : i * k + p] * bv[trans_b ? j * k + p : p * n + j];
          }
          c[i * n + j] = s;
        }
      }
      return c.Finish();
    }
    if (a.dtype() == DType::kBF16 && (out == DType::kBF16 || out == DType::kF32)) {
      Tensor c = Tensor::Uninitialized({m, n}, out);
      DnnlMatmul::Get().Run(dt::bf16, out == DType::kBF16 ? dt::bf16 : dt::f32, a.raw(), b.raw(),
                            c.raw(), m, n, k, trans_a, trans_b);
      return c;
    }
    // f32, and f16: oneDNN 2.6 has no f16 matmul on this CPU, so f16 operands
    // (already f16-exact) are widened to f32, multiplied with f32
    // accumulation, and the result rounded to f16 once.
    Tensor af = a.dtype() == DType::kF32 ? a : Cast(a, DType::kF32);
    Tensor bf = b.dtype() == DType::kF32 ? b : Cast(b, DType::kF32);
    Tensor c = Tensor::Uninitialized({m, n}, DType::kF32);
    DnnlMatmul::Get().Run(dt::f32, dt::f32, af.raw(), bf.raw(), c.raw(), m, n, k, trans_a, trans_b);
    return out == DType::kF32 ? c : Cast(c, out);
  }

  Tensor Cast(const Tensor& x, DType dtype) override {
    Tensor y = Tensor::Uninitialized(x.shape(), dtype);
    if (x.dtype() == dtype || UsesDouble(x) || dtype == DType::kF64) {
      y.CopyFrom(x);
      return y;
    }
    // f32 / f16 / bf16: widen to f32 and round once, as CopyFrom does.
    ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
      float buf[kBlock];
      StoreBlock(LoadBlock(x, begin, len, buf), y, begin, len);
    });
    return y;
  }

  Tensor Unary(OpId op, const Tensor& x) override {
    if (!IsUnaryOp(op)) NotInFamily(op, "unary");
    return UsesDouble(x) ? UnaryImpl<double>(op, x) : UnaryImpl<float>(op, x);
  }
  template <typename C>
  Tensor UnaryImpl(OpId op, const Tensor& x) {
    if constexpr (std::is_same_v<C, float>) {
      Tensor y = Tensor::Uninitialized(x.shape(), x.dtype());
      WithUnaryOp(op, [&](auto kOp) {
        ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
          float in_buf[kBlock], out_buf[kBlock];
          const float* __restrict xs = LoadBlock(x, begin, len, in_buf);
          float* __restrict ys = DestBlock(y, begin, out_buf);
          AMPD_SIMD
          for (int64_t i = 0; i < len; ++i) ys[i] = ApplyUnary<float>(kOp, xs[i]);
          StoreBlock(ys, y, begin, len);
        });
      });
      return y;
    } else {
      Values<C> xv(x);
      Output<C> y(x.shape(), x.dtype());
      for (int64_t i = 0; i < x.numel(); ++i) y[i] = ApplyUnary<C>(op, xv[i]);
      return y.Finish();
    }
  }

  Tensor UnaryBackward(OpId op, const Tensor& x, const Tensor& dy) override {
    if (!IsUnaryOp(op)) NotInFamily(op, "unary");
    return UsesDouble(x) ? UnaryBackwardImpl<double>(op, x, dy)
                         : UnaryBackwardImpl<float>(op, x, dy);
  }
  template <typename C>
  Tensor UnaryBackwardImpl(OpId op, const Tensor& x, const Tensor& dy) {
    if constexpr (std::is_same_v<C, float>) {
      Tensor dx = Tensor::Uninitialized(x.shape(), dy.dtype());
      WithUnaryOp(op, [&](auto kOp) {
        ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
          float x_buf[kBlock], g_buf[kBlock], out_buf[kBlock];
          const float* __restrict xs = LoadBlock(x, begin, len, x_buf);
          const float* __restrict gs = LoadBlock(dy, begin, len, g_buf);
          float* __restrict out = DestBlock(dx, begin, out_buf);
          AMPD_SIMD
          for (int64_t i = 0; i < len; ++i) out[i] = UnaryDerivative<float>(kOp, xs[i]) * gs[i];
          StoreBlock(out, dx, begin, len);
        });
      });
      return dx;
    } else {
      Values<C> xv(x), gv(dy);
      Output<C> dx(x.shape(), dy.dtype());
      for (int64_t i = 0; i < x.numel(); ++i) dx[i] = UnaryDerivative<C>(op, xv[i]) * gv[i];
      return dx.Finish();
    }
  }

  Tensor Binary(OpId op, const Tensor& a, const Tensor& b, DType out) override {
    if (!IsBinaryOp(op)) NotInFamily(op, "binary");
    return (UsesDouble(a) || UsesDouble(b) || out == DType::kF64)
               ? BinaryImpl<double>(op, a, b, out)
               : BinaryImpl<float>(op, a, b, out);
  }
  template <typename C>
  Tensor BinaryImpl(OpId op, const Tensor& a, const Tensor& b, DType out) {
    if constexpr (std::is_same_v<C, float>) {
      return BinaryFloat(op, a, b, out);
    }
    Values<C> av(a), bv(b);
    Output<C> y(a.shape(), out);
    const int64_t n = a.numel();
    if (b.numel() == n) {
      for (int64_t i = 0; i < n; ++i) y[i] = ApplyBinary<C>(op, av[i], bv[i]);
    } else if (b.numel() == 1) {
      for (int64_t i = 0; i < n; ++i) y[i] = ApplyBinary<C>(op, av[i], bv[0]);
    } else {
      const int64_t cols = b.numel();
      for (int64_t i = 0; i < n; ++i) y[i] = ApplyBinary<C>(op, av[i], bv[i % cols]);
    }
    return y.Finish();
  }

  Tensor BinaryFloat(OpId op, const Tensor& a, const Tensor& b, DType out) {
    Tensor y = Tensor::Uninitialized(a.shape(), out);
    const int64_t n = a.numel();
    const int64_t cols = b.numel();
    // A broadcast operand is small: widen it once.
    std::vector<float> b_small;
    if (cols != n) b_small = b.ToFloats();
    WithBinaryOp(op, [&](auto kOp) {
      ForBlocks(n, [&](int64_t begin, int64_t len) {
        float a_buf[kBlock], b_buf[kBlock], out_buf[kBlock];
        const float* __restrict as = LoadBlock(a, begin, len, a_buf);
        float* __restrict ys = DestBlock(y, begin, out_buf);
        if (cols == n) {
          const float* __restrict bs = LoadBlock(b, begin, len, b_buf);
          AMPD_SIMD
          for (int64_t i = 0; i < len; ++i) ys[i] = ApplyBinary<float>(kOp, as[i], bs[i]);
        } else if (cols == 1) {
          const float b0 = b_small[0];
          AMPD_SIMD
          for (int64_t i = 0; i < len; ++i) ys[i] = ApplyBinary<float>(kOp, as[i], b0);
        } else {
          // Row broadcast: runs of consecutive columns.
          for (int64_t i = 0; i < len;) {
            const int64_t c0 = (begin + i) % cols;
            const int64_t run = std::min(len - i, cols - c0);
            const float* __restrict bs = b_small.data() + c0;
            const float* __restrict ar = as + i;
            float* __restrict yr = ys + i;
            AMPD_SIMD
            for (int64_t j = 0; j < run; ++j) yr[j] = ApplyBinary<float>(kOp, ar[j], bs[j]);
            i += run;
          }
        }
        StoreBlock(ys, y, begin, len);
      });
    });
    return y;
  }

  Tensor Scale(const Tensor& x, double factor, DType out) override {
    if (UsesDouble(x) || out == DType::kF64) {
      Values<double> xv(x);
      Output<double> y(x.shape(), out);
      for (int64_t i = 0; i < x.numel(); ++i) y[i] = xv[i] * factor;
      return y.Finish();
    }
    Tensor y = Tensor::Uninitialized(x.shape(), out);
    const float f = static_cast<float>(factor);
    ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
      float in_buf[kBlock], out_buf[kBlock];
      const float* __restrict xs = LoadBlock(x, begin, len, in_buf);
      float* __restrict ys = DestBlock(y, begin, out_buf);
      AMPD_SIMD
      for (int64_t i = 0; i < len; ++i) ys[i] = xs[i] * f;
      StoreBlock(ys, y, begin, len);
    });
    return y;
  }

  Tensor SumAll(const Tensor& x, DType out) override {
    // Accumulate in double: a long f32 sum would otherwise drift with length.
    if (UsesDouble(x)) {
      const double* xv = x.data<double>();
      double s = 0;
      for (int64_t i = 0; i < x.numel(); ++i) s += xv[i];
      return Tensor::Full({}, out, s);
    }
    const double s =
        ChunkedSum(x.numel(), [&](int64_t begin, int64_t len, float* buf, double* acc) {
          Accumulate8<false>(LoadBlock(x, begin, len, buf), len, acc);
        });
    return Tensor::Full({}, out, s);
  }

  Tensor SumRows(const Tensor& x, DType out) override {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    std::vector<double> s(cols, 0.0);
    if (UsesDouble(x)) {
      const double* xv = x.data<double>();
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) s[c] += xv[r * cols + c];
      }
    } else {
      // Each column is summed over the rows in order, in double.
      std::vector<float> row_buf(x.dtype() == DType::kF32 ? 0 : cols);
      double* __restrict sp = s.data();
      for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict xr = LoadBlock(x, r * cols, cols, row_buf.data());
        AMPD_SIMD
        for (int64_t c = 0; c < cols; ++c) sp[c] += xr[c];
      }
    }
    return Tensor::FromDoubles(s, {cols}, out);
  }

  Tensor Softmax(const Tensor& x, bool log, DType out) override {
    return UsesDouble(x) ? SoftmaxImpl<double>(x, log, out) : SoftmaxImpl<float>(x, log, out);
  }
  template <typename C>
  Tensor SoftmaxImpl(const Tensor& x, bool log, DType out) {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    Values<C> xv(x);
    Output<C> y(x.shape(), out);
    for (int64_t r = 0; r < rows; ++r) {
      const C* xr = xv.data() + r * cols;
      C mx = -std::numeric_limits<C>::infinity();
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
      C sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
      const C lse = mx + std::log(sum);
      for (int64_t c = 0; c < cols; ++c) {
        y[r * cols + c] = log ? xr[c] - lse : std::exp(xr[c] - lse);
      }
    }
    return y.Finish();
  }

  Tensor SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out) override {
    return UsesDouble(y) ? SoftmaxBackwardImpl<double>(y, dy, log, out)
                         : SoftmaxBackwardImpl<float>(y, dy, log, out);
  }
  template <typename C>
  Tensor SoftmaxBackwardImpl(const Tensor& y, const Tensor& dy, bool log, DType out) {
    const int64_t cols = y.dim(-1), rows = Rows(y);
    Values<C> yv(y), gv(dy);
    Output<C> dx(y.shape(), out);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * cols;
      C dot = 0;
      for (int64_t c = 0; c < cols; ++c) dot += log ? gv[o + c] : gv[o + c] * yv[o + c];
      for (int64_t c = 0; c < cols; ++c) {
        dx[o + c] = log ? gv[o + c] - std::exp(yv[o + c]) * dot : yv[o + c] * (gv[o + c] - dot);
      }
    }
    return dx.Finish();
  }

  LayerNormResult LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                            DType out) override {
    return UsesDouble(x) ? LayerNormImpl<double>(x, gamma, beta, eps, out)
                         : LayerNormImpl<float>(x, gamma, beta, eps, out);
  }
  template <typename C>
  LayerNormResult LayerNormImpl(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                double eps, DType out) {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    const DType stat = std::is_same_v<C, double> ? DType::kF64 : DType::kF32;
    Values<C> xv(x), gv(gamma), bv(beta);
    Output<C> y(x.shape(), out), mean({rows}, stat), rstd({rows}, stat);
    for (int64_t r = 0; r < rows; ++r) {
      const C* xr = xv.data() + r * cols;
      C mu = 0;
      for (int64_t c = 0; c < cols; ++c) mu += xr[c];
      mu /= cols;
      C var = 0;
      for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
      var /= cols;
      const C rs = C(1) / std::sqrt(var + C(eps));
      mean[r] = mu;
      rstd[r] = rs;
      for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = (xr[c] - mu) * rs * gv[c] + bv[c];
    }
    return {y.Finish(), mean.Finish(), rstd.Finish()};
  }

  LayerNormGrads LayerNormBackward(const Tensor& x, const Tensor& gamma, const LayerNormResult& fwd,
                                   const Tensor& dy) override {
    return UsesDouble(x) ? LayerNormBackwardImpl<double>(x, gamma, fwd, dy)
                         : LayerNormBackwardImpl<float>(x, gamma, fwd, dy);
  }
  template <typename C>
  LayerNormGrads LayerNormBackwardImpl(const Tensor& x, const Tensor& gamma,
                                       const LayerNormResult& fwd, const Tensor& dy) {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    Values<C> xv(x), gv(gamma), dv(dy), mv(fwd.mean), rv(fwd.rstd);
    Output<C> dx(x.shape(), x.dtype());
    std::vector<double> dg(cols, 0.0), db(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * cols;
      C sum_g = 0, sum_gx = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const C xhat = (xv[o + c] - mv[r]) * rv[r];
        const C g = dv[o + c] * gv[c];
        sum_g += g;
        sum_gx += g * xhat;
        dg[c] += dv[o + c] * xhat;
        db[c] += dv[o + c];
      }
      for (int64_t c = 0; c < cols; ++c) {
        const C xhat = (xv[o + c] - mv[r]) * rv[r];
        dx[o + c] = rv[r] * (dv[o + c] * gv[c] - (sum_g + xhat * sum_gx) / cols);
      }
    }
    return {dx.Finish(), Tensor::FromDoubles(dg, {cols}, gamma.dtype()),
            Tensor::FromDoubles(db, {cols}, gamma.dtype())};
  }

  Tensor SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                             Tensor* row_logsumexp) override {
    const int64_t cols = logits.dim(-1), rows = Rows(logits);
    const bool dbl = UsesDouble(logits);
    Values<double> xv(logits);
    std::vector<double> lse(rows);
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = xv.data() + r * cols;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
      lse[r] = mx + std::log(sum);
      total += lse[r] - xr[labels[r]];
    }
    if (row_logsumexp)
      *row_logsumexp = Tensor::FromDoubles(lse, {rows}, dbl ? DType::kF64 : DType::kF32);
    return Tensor::Full({}, dbl ? DType::kF64 : DType::kF32, total / rows);
  }

  Tensor SoftmaxCrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                                     const Tensor& row_logsumexp, float dloss) override {
    return UsesDouble(logits) ? SceBackwardImpl<double>(logits, labels, row_logsumexp, dloss)
                              : SceBackwardImpl<float>(logits, labels, row_logsumexp, dloss);
  }
  template <typename C>
  Tensor SceBackwardImpl(const Tensor& logits, const std::vector<int32_t>& labels,
                         const Tensor& row_logsumexp, double dloss) {
    const int64_t cols = logits.dim(-1), rows = Rows(logits);
    Values<C> xv(logits), lv(row_logsumexp);
    Output<C> dx(logits.shape(), logits.dtype());
    const C g = C(dloss / rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const C p = std::exp(xv[r * cols + c] - lv[r]);
        dx[r * cols + c] = g * (p - (c == labels[r] ? C(1) : C(0)));
      }
    }
    return dx.Finish();
  }

  Tensor Embedding(const Tensor& table, const std::vector<int32_t>& ids) override {
    const int64_t dim = table.dim(1);
    const int64_t n = static_cast<int64_t>(ids.size());
    Tensor y = Tensor::Uninitialized({n, dim}, table.dtype());
    const size_t row_bytes = dim * DTypeSize(table.dtype());
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(static_cast<uint8_t*>(y.raw()) + i * row_bytes,
                  static_cast<const uint8_t*>(table.raw()) + ids[i] * row_bytes, row_bytes);
    }
    return y;
  }

  Tensor EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids,
                           int64_t num_rows) override {
    const int64_t dim = dy.dim(-1);
    Values<double> gv(dy);
    std::vector<double> acc(num_rows * dim, 0.0);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t c = 0; c < dim; ++c) acc[ids[i] * dim + c] += gv[i * dim + c];
    }
    return Tensor::FromDoubles(acc, {num_rows, dim}, dy.dtype());
  }

  Tensor Dropout(const Tensor& x, double p, uint64_t seed) override {
    if (UsesDouble(x)) return DropoutImpl<double>(x, p, seed);
    return DropoutImpl<float>(x, p, seed);
  }
  template <typename C>
  Tensor DropoutImpl(const Tensor& x, double p, uint64_t seed) {
    if constexpr (std::is_same_v<C, float>) {
      Tensor y = Tensor::Uninitialized(x.shape(), x.dtype());
      const float keep_scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
      ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
        float in_buf[kBlock], out_buf[kBlock];
        const float* __restrict xs = LoadBlock(x, begin, len, in_buf);
        float* __restrict ys = DestBlock(y, begin, out_buf);
        for (int64_t i = 0; i < len; ++i) {
          ys[i] = DropoutKeep(seed, begin + i, p) ? xs[i] * keep_scale : 0.0f;
        }
        StoreBlock(ys, y, begin, len);
      });
      return y;
    }
    Values<C> xv(x);
    Output<C> y(x.shape(), x.dtype());
    const C keep_scale = p < 1 ? C(1.0 / (1.0 - p)) : C(0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      y[i] = DropoutKeep(seed, i, p) ? xv[i] * keep_scale : C(0);
    }
    return y.Finish();
  }

  void AddInPlace(const Tensor& x, const Tensor& y, double alpha) override {
    if (UsesDouble(x) || UsesDouble(y)) {
      Values<double> xv(x), yv(y);
      std::vector<double> r(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) r[i] = xv[i] + alpha * yv[i];
      x.CopyFrom(Tensor::FromDoubles(r, x.shape(), DType::kF64));
      return;
    }
    // As the f64 path: x + alpha * y in double, then to float, then to x's dtype.
    ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
      float x_buf[kBlock], y_buf[kBlock];
      const float* xs = LoadBlock(x, begin, len, x_buf);
      const float* __restrict ys = LoadBlock(y, begin, len, y_buf);
      float* out = DestBlock(x, begin, x_buf);  // same index in place: no overlap issue
      AMPD_SIMD
      for (int64_t i = 0; i < len; ++i) {
        out[i] =
            static_cast<float>(static_cast<double>(xs[i]) + alpha * static_cast<double>(ys[i]));
      }
      StoreBlock(out, x, begin, len);
    });
  }

  NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads, float inv_scale) override {
    NonFiniteCheck check;
    for (size_t t = 0; t < grads.size(); ++t) {
      const Tensor& g = grads[t];
      bool bad = false;
      if (UsesDouble(g)) {
        std::vector<float> v = g.ToFloats();
        for (float& f : v) {
          f *= inv_scale;
          bad |= !std::isfinite(f);
        }
        g.CopyFrom(Tensor::FromVector(v, g.shape(), DType::kF32));
      } else {
        // Multiplied in f32, checked before rounding back to g's dtype.
        const int64_t n = g.numel();
        const int64_t blocks = (n + kBlock - 1) / kBlock;
        std::vector<char> block_bad(blocks, 0);
        ParallelFor(blocks, n >= kParallelMin, [&](int64_t b) {
          const int64_t begin = b * kBlock, len = std::min(kBlock, n - begin);
          float buf[kBlock];
          const float* in = LoadBlock(g, begin, len, buf);
          float* out = DestBlock(g, begin, buf);
          int any = 0;
#ifdef _OPENMP
#pragma omp simd reduction(| : any)
#endif
          for (int64_t i = 0; i < len; ++i) {
            out[i] = in[i] * inv_scale;
            // !isfinite, written so that it vectorises (NaN compares false).
            any |= !(std::fabs(out[i]) <= std::numeric_limits<float>::max());
          }
          StoreBlock(out, g, begin, len);
          block_bad[b] = any != 0;
        });
        bad = std::find(block_bad.begin(), block_bad.end(), 1) != block_bad.end();
      }
      if (bad && !check.found_inf) {
        check.found_inf = true;
        check.first_index = static_cast<int>(t);
      }
    }
    return check;
  }

  double SumOfSquares(const std::vector<Tensor>& tensors) override {
    double s = 0;
    for (const Tensor& t : tensors) {
      if (UsesDouble(t)) {
        const double* v = t.data<double>();
        for (int64_t i = 0; i < t.numel(); ++i) s += v[i] * v[i];
        continue;
      }
      s += ChunkedSum(t.numel(), [&](int64_t begin, int64_t len, float* buf, double* acc) {
        Accumulate8<true>(LoadBlock(t, begin, len, buf), len, acc);
      });
    }
    return s;
  }

  // Both updates write the parameter in place, a block at a time: each block
  // is read before it is written, so the math (f32, one rounding to the param
  // dtype) is that of computing a new tensor and copying it over.
  void SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
               const SgdHyper& h, bool first) override {
    float* mom = h.momentum != 0 ? momentum_buf.data<float>() : nullptr;
    ForBlocks(param.numel(), [&](int64_t begin, int64_t len) {
      float g_buf[kBlock], p_buf[kBlock];
      const float* __restrict gs = LoadBlock(grad, begin, len, g_buf);
      const float* ps = LoadBlock(param, begin, len, p_buf);
      float* out = DestBlock(param, begin, p_buf);  // element i read, then written
      if (mom == nullptr) {
        AMPD_SIMD
        for (int64_t i = 0; i < len; ++i) {
          const float d = gs[i] + h.weight_decay * ps[i];
          out[i] = ps[i] - h.lr * d;
        }
      } else {
        float* __restrict buf = mom + begin;
        AMPD_SIMD
        for (int64_t i = 0; i < len; ++i) {
          float d = gs[i] + h.weight_decay * ps[i];
          buf[i] = first ? d : h.momentum * buf[i] + d;
          d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
          out[i] = ps[i] - h.lr * d;
        }
      }
      StoreBlock(out, param, begin, len);
    });
  }

  void AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamWHyper& h) override {
    const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
    const float step_size = static_cast<float>(h.lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float decay = 1.0f - h.lr * h.weight_decay;
    const float beta1 = h.beta1, beta2 = h.beta2, eps = h.eps;
    const float one_minus_beta1 = 1.0f - h.beta1, one_minus_beta2 = 1.0f - h.beta2;
    float* m_all = exp_avg.data<float>();
    float* v_all = exp_avg_sq.data<float>();
    ForBlocks(param.numel(), [&](int64_t begin, int64_t len) {
      float g_buf[kBlock], p_buf[kBlock];
      const float* __restrict gs = LoadBlock(grad, begin, len, g_buf);
      const float* ps = LoadBlock(param, begin, len, p_buf);
      float* out = DestBlock(param, begin, p_buf);  // element i read, then written
      float* __restrict m = m_all + begin;
      float* __restrict v = v_all + begin;
      AMPD_SIMD
      for (int64_t i = 0; i < len; ++i) {
        const float g = gs[i];
        m[i] = beta1 * m[i] + one_minus_beta1 * g;
        v[i] = beta2 * v[i] + one_minus_beta2 * g * g;
        const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
        out[i] = ps[i] * decay - step_size * m[i] / denom;
      }
      StoreBlock(out, param, begin, len);
    });
  }
};

}  // namespace

Backend& CpuBackend() {
  static CpuBackendImpl* backend = new CpuBackendImpl();
  return *backend;
}

namespace {
// The CPU backend registers itself like every other backend (this target is
// alwayslink, so linking it is enough).
[[maybe_unused]] const bool kRegistered = (RegisterBackend(Device::kCpu, &CpuBackend()), true);
}  // namespace

}  // namespace ampd::engine
