// The elementwise CUDA kernels: fill, dtype conversion, the unary and binary
// families, scaling, in-place accumulation and dropout. Each the device twin
// of a loop of engine/cpu/elementwise.cc: load widened to the compute type,
// compute, round once on store.

#include "engine/cuda/kernels/kernel_util.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

using engine::ops::IsBinaryOp;
using engine::ops::IsUnaryOp;
using engine::ops::OpName;

// The switches name every op they compute and nothing else: the launchers
// refuse an op outside the family (IsUnaryOp / IsBinaryOp) before any launch,
// so the NaN of `default` is never stored.
template <typename C>
__device__ C ApplyUnary(OpId op, C x) {
  switch (op) {
    case OpId::kRelu:
      return x > C(0) ? x : C(0);
    case OpId::kGelu:
      return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440)));
    case OpId::kGeluTanh:  // 0.5 x (1 + tanh(u)) as x * sigmoid(2u), as the CPU
      return x / (C(1) + exp(C(-2 * 0.7978845608028654) * (x + C(0.044715) * x * x * x)));
    case OpId::kExp:
      return exp(x);
    case OpId::kLog:
      return log(x);
    case OpId::kNeg:
      return -x;
    case OpId::kSquare:
      return x * x;
    default:
      return C(NAN);
  }
}

template <typename C>
__device__ C UnaryDerivative(OpId op, C x) {
  switch (op) {
    case OpId::kRelu:
      return x > C(0) ? C(1) : C(0);
    case OpId::kGelu: {
      const C cdf = C(0.5) * (C(1) + erf(x * C(0.70710678118654752440)));
      const C pdf = exp(C(-0.5) * x * x) * C(0.3989422804014327);
      return cdf + x * pdf;
    }
    case OpId::kGeluTanh: {
      const C s = C(1) / (C(1) + exp(C(-2 * 0.7978845608028654) * (x + C(0.044715) * x * x * x)));
      return s +
             C(2) * x * s * (C(1) - s) * C(0.7978845608028654) * (C(1) + C(3 * 0.044715) * x * x);
    }
    case OpId::kExp:
      return exp(x);
    case OpId::kLog:
      return C(1) / x;
    case OpId::kNeg:
      return C(-1);
    case OpId::kSquare:
      return C(2) * x;
    default:
      return C(NAN);
  }
}

template <typename C>
__device__ C ApplyBinary(OpId op, C a, C b) {
  switch (op) {
    case OpId::kAdd:
      return a + b;
    case OpId::kSub:
      return a - b;
    case OpId::kMul:
      return a * b;
    default:
      return C(NAN);
  }
}

// "" when `op` is in the family a launcher computes, else why not.
std::string RefuseOp(bool in_family, OpId op, const char* launcher) {
  if (in_family) return "";
  return std::string(launcher) + ": op " + OpName(op) + " has no CUDA kernel here";
}

// ---- elementwise

__global__ void FillKernel(void* y, int dt, int64_t n, double value) {
  GRID_STRIDE(i, n) { Store<double>(y, dt, i, value); }
}

// The kernels below take W: 1, or kVec for 16-byte accesses (the launchers
// choose kVec when every buffer is Aligned16); the bits are the same either way.
template <typename C, int W>
__global__ void ConvertKernel(const void* x, int xdt, void* y, int ydt, int64_t n) {
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    C v[w];
    LoadN(x, xdt, i, v);
    StoreN(y, ydt, i, v);
  });
}

template <typename C, int W>
__global__ void UnaryKernel(OpId op, const void* x, int xdt, void* y, int ydt, int64_t n) {
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    C v[w];
    LoadN(x, xdt, i, v);
#pragma unroll
    for (int k = 0; k < w; ++k) v[k] = ApplyUnary<C>(op, v[k]);
    StoreN(y, ydt, i, v);
  });
}

template <typename C, int W>
__global__ void UnaryBackwardKernel(OpId op, const void* x, int xdt, const void* dy, int gdt,
                                    void* dx, int64_t n) {
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    C v[w], g[w];
    LoadN(x, xdt, i, v);
    LoadN(dy, gdt, i, g);
#pragma unroll
    for (int k = 0; k < w; ++k) v[k] = UnaryDerivative<C>(op, v[k]) * g[k];
    StoreN(dx, gdt, i, v);
  });
}

// b has bn elements: n (elementwise), 1 (a scalar) or a row repeated (i % bn;
// for W = kVec a multiple of kVec, so that a group never wraps).
template <typename C, int W>
__global__ void BinaryKernel(OpId op, const void* a, int adt, const void* b, int bdt, int64_t bn,
                             void* y, int ydt, int64_t n) {
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    C u[w], v[w];
    LoadN(a, adt, i, u);
    if (bn == 1) {
      const C scalar = Load<C>(b, bdt, 0);
#pragma unroll
      for (int k = 0; k < w; ++k) v[k] = scalar;
    } else {
      LoadN(b, bdt, bn == n ? i : i % bn, v);
    }
#pragma unroll
    for (int k = 0; k < w; ++k) u[k] = ApplyBinary<C>(op, u[k], v[k]);
    StoreN(y, ydt, i, u);
  });
}

template <typename C, int W>
__global__ void ScaleKernel(const void* x, int xdt, C factor, void* y, int ydt, int64_t n) {
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    C v[w];
    LoadN(x, xdt, i, v);
#pragma unroll
    for (int k = 0; k < w; ++k) v[k] *= factor;
    StoreN(y, ydt, i, v);
  });
}

// As the CPU: x + alpha * y in f64, then to x's dtype (through f32 for the
// 16-bit dtypes, as Store rounds f64).
template <int W>
__global__ void AddInPlaceKernel(void* x, int xdt, const void* y, int ydt, double alpha,
                                 int64_t n) {
  ForEachGroup<W>(n, [&](auto width, int64_t i) {
    constexpr int w = kWidth<decltype(width)>;
    double u[w], v[w];
    LoadN(x, xdt, i, u);
    LoadN(y, ydt, i, v);
#pragma unroll
    for (int k = 0; k < w; ++k) u[k] += alpha * v[k];
    StoreN(x, xdt, i, u);
  });
}

__global__ void DropoutKernel(const void* x, int dt, double p, uint64_t seed, void* y, int64_t n) {
  const double keep_scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const float keep_scale_f = static_cast<float>(keep_scale);
  GRID_STRIDE(i, n) {
    const uint64_t z = DropoutHash(seed, static_cast<uint64_t>(i));
    const bool keep = static_cast<double>(z >> 11) * 0x1.0p-53 >= p;
    if (dt == kF64) {
      Store<double>(y, dt, i, keep ? Load<double>(x, dt, i) * keep_scale : 0.0);
    } else {
      Store<float>(y, dt, i, keep ? Load<float>(x, dt, i) * keep_scale_f : 0.0f);
    }
  }
}

// The grid for W = kVec: one thread a group of kVec.
int VecBlocks(int64_t n) { return Blocks((n + kVec - 1) / kVec); }

bool Vectorized(const void* a, const void* b, const void* c = nullptr) {
  return Aligned16(a) && Aligned16(b) && (c == nullptr || Aligned16(c));
}

}  // namespace

std::string LaunchFill(void* y, int dt, int64_t n, double value, Stream s) {
  if (n == 0) return "";
  LAUNCH(FillKernel, Blocks(n), kThreads, S(s), y, dt, n, value);
  return Check("FillKernel");
}

std::string LaunchConvert(const void* x, int xdt, void* y, int ydt, int64_t n, Stream s) {
  if (n == 0) return "";
  if (xdt == ydt) {
    cudaError_t err = cudaMemcpyAsync(y, x, n * ElementSize(xdt), cudaMemcpyDeviceToDevice, S(s));
    return err == cudaSuccess ? ""
                              : std::string("cudaMemcpyAsync(convert): ") + cudaGetErrorString(err);
  }
  if (AnyF64(xdt, ydt)) {
    LAUNCH((ConvertKernel<double, 1>), Blocks(n), kThreads, S(s), x, xdt, y, ydt, n);
  } else if (Vectorized(x, y)) {
    LAUNCH((ConvertKernel<float, kVec>), VecBlocks(n), kThreads, S(s), x, xdt, y, ydt, n);
  } else {
    LAUNCH((ConvertKernel<float, 1>), Blocks(n), kThreads, S(s), x, xdt, y, ydt, n);
  }
  return Check("ConvertKernel");
}

std::string LaunchUnary(OpId op, const void* x, int xdt, void* y, int ydt, int64_t n, Stream s) {
  if (std::string e = RefuseOp(IsUnaryOp(op), op, "LaunchUnary"); !e.empty()) return e;
  if (n == 0) return "";
  if (AnyF64(xdt, ydt)) {
    LAUNCH((UnaryKernel<double, 1>), Blocks(n), kThreads, S(s), op, x, xdt, y, ydt, n);
  } else if (Vectorized(x, y)) {
    LAUNCH((UnaryKernel<float, kVec>), VecBlocks(n), kThreads, S(s), op, x, xdt, y, ydt, n);
  } else {
    LAUNCH((UnaryKernel<float, 1>), Blocks(n), kThreads, S(s), op, x, xdt, y, ydt, n);
  }
  return Check("UnaryKernel");
}

std::string LaunchUnaryBackward(OpId op, const void* x, int xdt, const void* dy, int gdt, void* dx,
                                int64_t n, Stream s) {
  if (std::string e = RefuseOp(IsUnaryOp(op), op, "LaunchUnaryBackward"); !e.empty()) return e;
  if (n == 0) return "";
  if (AnyF64(xdt, gdt)) {
    LAUNCH((UnaryBackwardKernel<double, 1>), Blocks(n), kThreads, S(s), op, x, xdt, dy, gdt, dx, n);
  } else if (Vectorized(x, dy, dx)) {
    LAUNCH((UnaryBackwardKernel<float, kVec>), VecBlocks(n), kThreads, S(s), op, x, xdt, dy, gdt,
           dx, n);
  } else {
    LAUNCH((UnaryBackwardKernel<float, 1>), Blocks(n), kThreads, S(s), op, x, xdt, dy, gdt, dx, n);
  }
  return Check("UnaryBackwardKernel");
}

std::string LaunchBinary(OpId op, const void* a, int adt, const void* b, int bdt, int64_t bn,
                         void* y, int ydt, int64_t n, Stream s) {
  if (std::string e = RefuseOp(IsBinaryOp(op), op, "LaunchBinary"); !e.empty()) return e;
  if (n == 0) return "";
  if (AnyF64(adt, bdt, ydt)) {
    LAUNCH((BinaryKernel<double, 1>), Blocks(n), kThreads, S(s), op, a, adt, b, bdt, bn, y, ydt, n);
  } else if (Vectorized(a, b, y) && (bn == n || bn == 1 || bn % kVec == 0)) {
    LAUNCH((BinaryKernel<float, kVec>), VecBlocks(n), kThreads, S(s), op, a, adt, b, bdt, bn, y,
           ydt, n);
  } else {
    LAUNCH((BinaryKernel<float, 1>), Blocks(n), kThreads, S(s), op, a, adt, b, bdt, bn, y, ydt, n);
  }
  return Check("BinaryKernel");
}

std::string LaunchScale(const void* x, int xdt, double factor, void* y, int ydt, int64_t n,
                        Stream s) {
  if (n == 0) return "";
  if (AnyF64(xdt, ydt)) {
    LAUNCH((ScaleKernel<double, 1>), Blocks(n), kThreads, S(s), x, xdt, factor, y, ydt, n);
  } else if (Vectorized(x, y)) {
    LAUNCH((ScaleKernel<float, kVec>), VecBlocks(n), kThreads, S(s), x, xdt,
           static_cast<float>(factor), y, ydt, n);
  } else {
    LAUNCH((ScaleKernel<float, 1>), Blocks(n), kThreads, S(s), x, xdt, static_cast<float>(factor),
           y, ydt, n);
  }
  return Check("ScaleKernel");
}

std::string LaunchAddInPlace(void* x, int xdt, const void* y, int ydt, double alpha, int64_t n,
                             Stream s) {
  if (n == 0) return "";
  if (Vectorized(x, y)) {
    LAUNCH(AddInPlaceKernel<kVec>, VecBlocks(n), kThreads, S(s), x, xdt, y, ydt, alpha, n);
  } else {
    LAUNCH(AddInPlaceKernel<1>, Blocks(n), kThreads, S(s), x, xdt, y, ydt, alpha, n);
  }
  return Check("AddInPlaceKernel");
}

std::string LaunchDropout(const void* x, int dt, double p, uint64_t seed, void* y, int64_t n,
                          Stream s) {
  if (n == 0) return "";
  LAUNCH(DropoutKernel, Blocks(n), kThreads, S(s), x, dt, p, seed, y, n);
  return Check("DropoutKernel");
}

}  // namespace ampd::engine::cuda
