// The CUDA backend's kernels. Small, one per computation, each the device
// twin of a CPU backend loop (engine/cpu/cpu_backend.cc): load widened to the
// compute type, compute, round once on store. Reductions use a fixed grid
// for a given size and combine partials in a fixed order, so results do not
// vary from run to run.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/cuda/kernels.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::cuda {
namespace {

using engine::IsBinaryOp;
using engine::IsUnaryOp;
using engine::OpName;

constexpr int kThreads = 256;
enum DT { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3 };

template <typename C>
__device__ __forceinline__ C Load(const void* p, int dt, int64_t i) {
  switch (dt) {
    case kF32:
      return static_cast<C>(static_cast<const float*>(p)[i]);
    case kF16:
      return static_cast<C>(__half2float(static_cast<const __half*>(p)[i]));
    case kBF16:
      return static_cast<C>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    default:
      return static_cast<C>(static_cast<const double*>(p)[i]);
  }
}

// Rounds once: f64 values bound for f16/bf16 go through f32, as on the CPU.
template <typename C>
__device__ __forceinline__ void Store(void* p, int dt, int64_t i, C v) {
  switch (dt) {
    case kF32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v));
      break;
    case kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    default:
      static_cast<double*>(p)[i] = static_cast<double>(v);
  }
}

__host__ __device__ int ElementSize(int dt) { return dt == kF32 ? 4 : dt == kF64 ? 8 : 2; }

int Blocks(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)));
}

std::string Check(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return "";
  return std::string(kernel) + " launch: " + cudaGetErrorString(err);
}

cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }

// Kernel launches go through one macro so that the CPU emulator
// (tests/engine/cuda/emu) can run this file unchanged.
#ifdef AMPD_CUDA_EMU
#define LAUNCH(kernel, grid, block, stream, ...) \
  AMPD_EMU_LAUNCH(kernel, grid, block, stream)(__VA_ARGS__)
#else
#define LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif

#define GRID_STRIDE(i, n)                                                                \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// A fixed-order tree sum over the block's kThreads values (result in thread 0).
template <typename T>
__device__ T BlockSum(T v) {
  __shared__ T shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  T result = shared[0];
  __syncthreads();
  return result;
}

template <typename T>
__device__ T BlockMax(T v) {
  __shared__ T shared[kThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride)
      shared[threadIdx.x] = max(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  T result = shared[0];
  __syncthreads();
  return result;
}

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

template <typename C>
__global__ void ConvertKernel(const void* x, int xdt, void* y, int ydt, int64_t n) {
  GRID_STRIDE(i, n) { Store<C>(y, ydt, i, Load<C>(x, xdt, i)); }
}

template <typename C>
__global__ void UnaryKernel(OpId op, const void* x, int xdt, void* y, int ydt, int64_t n) {
  GRID_STRIDE(i, n) { Store<C>(y, ydt, i, ApplyUnary<C>(op, Load<C>(x, xdt, i))); }
}

template <typename C>
__global__ void UnaryBackwardKernel(OpId op, const void* x, int xdt, const void* dy, int gdt,
                                    void* dx, int64_t n) {
  GRID_STRIDE(i, n) {
    Store<C>(dx, gdt, i, UnaryDerivative<C>(op, Load<C>(x, xdt, i)) * Load<C>(dy, gdt, i));
  }
}

template <typename C>
__global__ void BinaryKernel(OpId op, const void* a, int adt, const void* b, int bdt, int64_t bn,
                             void* y, int ydt, int64_t n) {
  GRID_STRIDE(i, n) {
    const int64_t j = bn == n ? i : bn == 1 ? 0 : i % bn;
    Store<C>(y, ydt, i, ApplyBinary<C>(op, Load<C>(a, adt, i), Load<C>(b, bdt, j)));
  }
}

template <typename C>
__global__ void ScaleKernel(const void* x, int xdt, C factor, void* y, int ydt, int64_t n) {
  GRID_STRIDE(i, n) { Store<C>(y, ydt, i, Load<C>(x, xdt, i) * factor); }
}

__global__ void AddInPlaceKernel(void* x, int xdt, const void* y, int ydt, double alpha,
                                 int64_t n) {
  // As the CPU: x + alpha * y in f64, then to x's dtype.
  GRID_STRIDE(i, n) {
    const double v = Load<double>(x, xdt, i) + alpha * Load<double>(y, ydt, i);
    if (xdt == kF64) {
      Store<double>(x, xdt, i, v);
    } else {
      Store<float>(x, xdt, i, static_cast<float>(v));
    }
  }
}

__global__ void DropoutKernel(const void* x, int dt, double p, uint64_t seed, void* y, int64_t n) {
  const double keep_scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const float keep_scale_f = static_cast<float>(keep_scale);
  GRID_STRIDE(i, n) {
    // engine::DropoutHash, bit for bit.
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(i) + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const bool keep = static_cast<double>(z >> 11) * 0x1.0p-53 >= p;
    if (dt == kF64) {
      Store<double>(y, dt, i, keep ? Load<double>(x, dt, i) * keep_scale : 0.0);
    } else {
      Store<float>(y, dt, i, keep ? Load<float>(x, dt, i) * keep_scale_f : 0.0f);
    }
  }
}

// ---- reductions

// Stage 1: each block sums a fixed grid-stride share of (mult * x) in f64.
__global__ void PartialSumKernel(const void* x, int xdt, int64_t n, bool squares, double* partial) {
  double acc = 0;
  GRID_STRIDE(i, n) {
    const double v = Load<double>(x, xdt, i);
    acc += squares ? v * v : v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Stage 2: the partials in order; out = (carry + sum) * multiplier.
__global__ void FinishSumKernel(const double* partial, int count, double multiplier, double* carry,
                                void* out, int odt) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double s = carry ? *carry : 0.0;
  for (int i = 0; i < count; ++i) s += partial[i];
  if (carry) *carry = s;
  Store<double>(out, odt, 0, s * multiplier);
}

int ReduceBlocks(int64_t n) {
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(kMaxReduceBlocks, (n + 4 * kThreads - 1) / (4 * kThreads))));
}

__global__ void SumRowsKernel(const void* x, int xdt, int64_t rows, int64_t cols, void* out,
                              int odt) {
  GRID_STRIDE(c, cols) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += Load<double>(x, xdt, r * cols + c);
    Store<double>(out, odt, c, s);
  }
}

// ---- row kernels: one block per row

template <typename C>
__global__ void SoftmaxKernel(const void* x, int xdt, int64_t cols, bool log, void* y, int ydt) {
  const int64_t o = blockIdx.x * cols;
  C mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = max(mx, Load<C>(x, xdt, o + c));
  mx = BlockMax(mx);
  C sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += exp(Load<C>(x, xdt, o + c) - mx);
  sum = BlockSum(sum);
  const C lse = mx + ::log(sum);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C v = Load<C>(x, xdt, o + c) - lse;
    Store<C>(y, ydt, o + c, log ? v : exp(v));
  }
}

template <typename C>
__global__ void SoftmaxBackwardKernel(const void* y, int ydt, const void* dy, int gdt, int64_t cols,
                                      bool log, void* dx, int odt) {
  const int64_t o = blockIdx.x * cols;
  C dot = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C g = Load<C>(dy, gdt, o + c);
    dot += log ? g : g * Load<C>(y, ydt, o + c);
  }
  dot = BlockSum(dot);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C g = Load<C>(dy, gdt, o + c), yv = Load<C>(y, ydt, o + c);
    Store<C>(dx, odt, o + c, log ? g - exp(yv) * dot : yv * (g - dot));
  }
}

template <typename C>
__global__ void LayerNormKernel(const void* x, int xdt, const void* gamma, int gdt,
                                const void* beta, int64_t cols, C eps, void* y, int ydt, void* mean,
                                void* rstd, int sdt) {
  const int64_t r = blockIdx.x, o = r * cols;
  C s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += Load<C>(x, xdt, o + c);
  const C mu = BlockSum(s) / C(cols);
  C v = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C d = Load<C>(x, xdt, o + c) - mu;
    v += d * d;
  }
  const C var = BlockSum(v) / C(cols);
  const C rs = C(1) / sqrt(var + eps);
  if (threadIdx.x == 0) {
    Store<C>(mean, sdt, r, mu);
    Store<C>(rstd, sdt, r, rs);
  }
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    Store<C>(y, ydt, o + c,
             (Load<C>(x, xdt, o + c) - mu) * rs * Load<C>(gamma, gdt, c) + Load<C>(beta, gdt, c));
  }
}

template <typename C>
__global__ void LayerNormBackwardRowsKernel(const void* x, int xdt, const void* gamma, int gdt,
                                            const void* mean, const void* rstd, int sdt,
                                            const void* dy, int dydt, int64_t cols, void* dx) {
  const int64_t r = blockIdx.x, o = r * cols;
  const C mu = Load<C>(mean, sdt, r), rs = Load<C>(rstd, sdt, r);
  C sg = 0, sgx = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C xhat = (Load<C>(x, xdt, o + c) - mu) * rs;
    const C g = Load<C>(dy, dydt, o + c) * Load<C>(gamma, gdt, c);
    sg += g;
    sgx += g * xhat;
  }
  sg = BlockSum(sg);
  sgx = BlockSum(sgx);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const C xhat = (Load<C>(x, xdt, o + c) - mu) * rs;
    Store<C>(
        dx, xdt, o + c,
        rs * (Load<C>(dy, dydt, o + c) * Load<C>(gamma, gdt, c) - (sg + xhat * sgx) / C(cols)));
  }
}

template <typename C>
__global__ void LayerNormBackwardColumnsKernel(const void* x, int xdt, const void* mean,
                                               const void* rstd, int sdt, const void* dy, int dydt,
                                               int64_t rows, int64_t cols, void* dgamma,
                                               void* dbeta, int gdt) {
  GRID_STRIDE(c, cols) {
    double dg = 0, db = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const C xhat =
          (Load<C>(x, xdt, r * cols + c) - Load<C>(mean, sdt, r)) * Load<C>(rstd, sdt, r);
      const C g = Load<C>(dy, dydt, r * cols + c);
      dg += static_cast<double>(g * xhat);
      db += static_cast<double>(g);
    }
    Store<double>(dgamma, gdt, c, dg);
    Store<double>(dbeta, gdt, c, db);
  }
}

template <typename C>
__global__ void SoftmaxCrossEntropyRowsKernel(const void* logits, int dt, const int32_t* labels,
                                              int64_t cols, void* lse, int ldt, double* row_loss) {
  const int64_t r = blockIdx.x, o = r * cols;
  C mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = max(mx, Load<C>(logits, dt, o + c));
  mx = BlockMax(mx);
  C sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    sum += exp(Load<C>(logits, dt, o + c) - mx);
  sum = BlockSum(sum);
  if (threadIdx.x == 0) {
    const C l = mx + log(sum);
    Store<C>(lse, ldt, r, l);
    row_loss[r] = static_cast<double>(l) - Load<double>(logits, dt, o + labels[r]);
  }
}

// dloss: the upstream gradient, one element on the device (read here, so the
// host never waits for it); as the CPU, it is taken as an f32 and divided by
// the rows in f64.
template <typename C>
__global__ void SoftmaxCrossEntropyBackwardKernel(const void* logits, int dt, const int32_t* labels,
                                                  const void* lse, int ldt, int64_t rows,
                                                  int64_t cols, const void* dloss, int ddt,
                                                  void* dx) {
  const C scale =
      static_cast<C>(static_cast<double>(static_cast<float>(Load<double>(dloss, ddt, 0))) /
                     static_cast<double>(rows));
  GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    const C p = exp(Load<C>(logits, dt, i) - Load<C>(lse, ldt, r));
    Store<C>(dx, dt, i, scale * (p - (c == labels[r] ? C(1) : C(0))));
  }
}

__global__ void EmbeddingKernel(const void* table, int dt, const int32_t* ids, int64_t n,
                                int64_t dim, void* y) {
  const int size = ElementSize(dt);
  GRID_STRIDE(i, n * dim) {
    const int64_t row = i / dim, c = i % dim;
    const char* src = static_cast<const char*>(table) + (ids[row] * dim + c) * size;
    char* dst = static_cast<char*>(y) + i * size;
    for (int b = 0; b < size; ++b) dst[b] = src[b];
  }
}

__global__ void EmbeddingBackwardKernel(const void* dy, int dt, const int32_t* ids, int64_t n,
                                        int64_t dim, double* acc) {
  // One thread per column: ids are visited in order, so sums are deterministic.
  GRID_STRIDE(c, dim) {
    for (int64_t i = 0; i < n; ++i) acc[ids[i] * dim + c] += Load<double>(dy, dt, i * dim + c);
  }
}

// ---- AMP

__global__ void UnscaleAndCheckKernel(TensorList list, const float* scale, float factor,
                                      float* found_inf) {
  const int t = blockIdx.y;
  // As PyTorch: the reciprocal in f64, rounded to f32.
  const float mult = scale ? static_cast<float>(1.0 / static_cast<double>(*scale)) : factor;
  void* p = list.ptr[t];
  const int dt = list.dt[t];
  const int64_t n = list.numel[t];
  bool bad = false;
  GRID_STRIDE(i, n) {
    const float v = Load<float>(p, dt, i) * mult;  // checked before rounding back
    bad |= !isfinite(v);
    Store<float>(p, dt, i, v);
  }
  if (bad) *found_inf = 1.0f;  // every writer writes the same value
}

__global__ void UpdateScaleKernel(float* scale, float* growth_tracker, const float* found_inf,
                                  float growth_factor, float backoff_factor,
                                  int64_t growth_interval, float min_scale, float max_scale) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float s = *scale;
  if (*found_inf != 0.0f) {
    s *= backoff_factor;
    *growth_tracker = 0;
  } else {
    const int64_t successful = static_cast<int64_t>(*growth_tracker) + 1;
    if (successful == growth_interval) {
      const float grown = s * growth_factor;
      if (isfinite(grown)) s = grown;
      *growth_tracker = 0;
    } else {
      *growth_tracker = static_cast<float>(successful);
    }
  }
  if (min_scale > 0) s = fmaxf(s, min_scale);
  if (max_scale > 0) s = fminf(s, max_scale);
  *scale = s;
}

__global__ void MultiSumOfSquaresKernel(TensorList list, int blocks_per_tensor, double* partial) {
  const int t = blockIdx.y;
  double acc = 0;
  GRID_STRIDE(i, list.numel[t]) {
    const double v = Load<double>(list.ptr[t], list.dt[t], i);
    acc += v * v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[t * blocks_per_tensor + blockIdx.x] = acc;
}

__global__ void SgdStepKernel(void* param, int pdt, const void* grad, int gdt, float* momentum,
                              int64_t n, SgdArgs a, const float* found_inf, void* model_copy,
                              int mdt) {
  if (found_inf && *found_inf != 0.0f) return;  // skipped step: nothing changes
  GRID_STRIDE(i, n) {
    const float p = Load<float>(param, pdt, i);
    float d = Load<float>(grad, gdt, i) + a.weight_decay * p;
    if (momentum) {
      momentum[i] = a.first ? d : a.momentum * momentum[i] + d;
      d = a.nesterov ? d + a.momentum * momentum[i] : momentum[i];
    }
    const float out = p - a.lr * d;
    Store<float>(param, pdt, i, out);
    if (model_copy) Store<float>(model_copy, mdt, i, Load<float>(param, pdt, i));
  }
}

__global__ void AdamWStepKernel(void* param, int pdt, const void* grad, int gdt, float* m, float* v,
                                int64_t n, AdamWArgs a, const float* step_ptr,
                                const float* found_inf, void* model_copy, int mdt) {
  if (found_inf && *found_inf != 0.0f) return;
  const int64_t step = step_ptr ? static_cast<int64_t>(*step_ptr) + 1 : a.step;
  const double bc1 = 1.0 - pow(static_cast<double>(a.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - pow(static_cast<double>(a.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(a.lr / bc1);
  const float bc2_sqrt = static_cast<float>(sqrt(bc2));
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float one_minus_beta1 = 1.0f - a.beta1, one_minus_beta2 = 1.0f - a.beta2;
  GRID_STRIDE(i, n) {
    const float g = Load<float>(grad, gdt, i);
    m[i] = a.beta1 * m[i] + one_minus_beta1 * g;
    v[i] = a.beta2 * v[i] + one_minus_beta2 * g * g;
    const float denom = sqrtf(v[i]) / bc2_sqrt + a.eps;
    Store<float>(param, pdt, i, Load<float>(param, pdt, i) * decay - step_size * m[i] / denom);
    if (model_copy) Store<float>(model_copy, mdt, i, Load<float>(param, pdt, i));
  }
}

bool AnyF64(int a, int b, int c = kF32) { return a == kF64 || b == kF64 || c == kF64; }

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
    LAUNCH(ConvertKernel<double>, Blocks(n), kThreads, S(s), x, xdt, y, ydt, n);
  } else {
    LAUNCH(ConvertKernel<float>, Blocks(n), kThreads, S(s), x, xdt, y, ydt, n);
  }
  return Check("ConvertKernel");
}

std::string LaunchUnary(OpId op, const void* x, int xdt, void* y, int ydt, int64_t n, Stream s) {
  if (std::string e = RefuseOp(IsUnaryOp(op), op, "LaunchUnary"); !e.empty()) return e;
  if (n == 0) return "";
  if (AnyF64(xdt, ydt)) {
    LAUNCH(UnaryKernel<double>, Blocks(n), kThreads, S(s), op, x, xdt, y, ydt, n);
  } else {
    LAUNCH(UnaryKernel<float>, Blocks(n), kThreads, S(s), op, x, xdt, y, ydt, n);
  }
  return Check("UnaryKernel");
}

std::string LaunchUnaryBackward(OpId op, const void* x, int xdt, const void* dy, int gdt, void* dx,
                                int64_t n, Stream s) {
  if (std::string e = RefuseOp(IsUnaryOp(op), op, "LaunchUnaryBackward"); !e.empty()) return e;
  if (n == 0) return "";
  if (AnyF64(xdt, gdt)) {
    LAUNCH(UnaryBackwardKernel<double>, Blocks(n), kThreads, S(s), op, x, xdt, dy, gdt, dx, n);
  } else {
    LAUNCH(UnaryBackwardKernel<float>, Blocks(n), kThreads, S(s), op, x, xdt, dy, gdt, dx, n);
  }
  return Check("UnaryBackwardKernel");
}

std::string LaunchBinary(OpId op, const void* a, int adt, const void* b, int bdt, int64_t bn,
                         void* y, int ydt, int64_t n, Stream s) {
  if (std::string e = RefuseOp(IsBinaryOp(op), op, "LaunchBinary"); !e.empty()) return e;
  if (n == 0) return "";
  if (AnyF64(adt, bdt, ydt)) {
    LAUNCH(BinaryKernel<double>, Blocks(n), kThreads, S(s), op, a, adt, b, bdt, bn, y, ydt, n);
  } else {
    LAUNCH(BinaryKernel<float>, Blocks(n), kThreads, S(s), op, a, adt, b, bdt, bn, y, ydt, n);
  }
  return Check("BinaryKernel");
}

std::string LaunchScale(const void* x, int xdt, double factor, void* y, int ydt, int64_t n,
                        Stream s) {
  if (n == 0) return "";
  if (AnyF64(xdt, ydt)) {
    LAUNCH(ScaleKernel<double>, Blocks(n), kThreads, S(s), x, xdt, factor, y, ydt, n);
  } else {
    LAUNCH(ScaleKernel<float>, Blocks(n), kThreads, S(s), x, xdt, static_cast<float>(factor), y,
           ydt, n);
  }
  return Check("ScaleKernel");
}

std::string LaunchAddInPlace(void* x, int xdt, const void* y, int ydt, double alpha, int64_t n,
                             Stream s) {
  if (n == 0) return "";
  LAUNCH(AddInPlaceKernel, Blocks(n), kThreads, S(s), x, xdt, y, ydt, alpha, n);
  return Check("AddInPlaceKernel");
}

std::string LaunchSumAll(const void* x, int xdt, int64_t n, double* scratch, void* out, int odt,
                         Stream s) {
  const int blocks = ReduceBlocks(n);
  LAUNCH(PartialSumKernel, blocks, kThreads, S(s), x, xdt, n, false, scratch);
  LAUNCH(FinishSumKernel, 1, 1, S(s), scratch, blocks, 1.0, nullptr, out, odt);
  return Check("SumAll");
}

std::string LaunchSumRows(const void* x, int xdt, int64_t rows, int64_t cols, void* out, int odt,
                          Stream s) {
  if (cols == 0) return "";
  LAUNCH(SumRowsKernel, Blocks(cols), kThreads, S(s), x, xdt, rows, cols, out, odt);
  return Check("SumRowsKernel");
}

std::string LaunchSoftmax(const void* x, int xdt, int64_t rows, int64_t cols, bool log, void* y,
                          int ydt, Stream s) {
  if (rows == 0) return "";
  if (AnyF64(xdt, ydt)) {
    LAUNCH(SoftmaxKernel<double>, rows, kThreads, S(s), x, xdt, cols, log, y, ydt);
  } else {
    LAUNCH(SoftmaxKernel<float>, rows, kThreads, S(s), x, xdt, cols, log, y, ydt);
  }
  return Check("SoftmaxKernel");
}

std::string LaunchSoftmaxBackward(const void* y, int ydt, const void* dy, int gdt, int64_t rows,
                                  int64_t cols, bool log, void* dx, int odt, Stream s) {
  if (rows == 0) return "";
  if (AnyF64(ydt, gdt, odt)) {
    LAUNCH(SoftmaxBackwardKernel<double>, rows, kThreads, S(s), y, ydt, dy, gdt, cols, log, dx,
           odt);
  } else {
    LAUNCH(SoftmaxBackwardKernel<float>, rows, kThreads, S(s), y, ydt, dy, gdt, cols, log, dx, odt);
  }
  return Check("SoftmaxBackwardKernel");
}

std::string LaunchLayerNorm(const void* x, int xdt, const void* gamma, int gdt, const void* beta,
                            int64_t rows, int64_t cols, double eps, void* y, int ydt, void* mean,
                            void* rstd, int sdt, Stream s) {
  if (rows == 0) return "";
  if (xdt == kF64) {
    LAUNCH(LayerNormKernel<double>, rows, kThreads, S(s), x, xdt, gamma, gdt, beta, cols, eps, y,
           ydt, mean, rstd, sdt);
  } else {
    LAUNCH(LayerNormKernel<float>, rows, kThreads, S(s), x, xdt, gamma, gdt, beta, cols,
           static_cast<float>(eps), y, ydt, mean, rstd, sdt);
  }
  return Check("LayerNormKernel");
}

std::string LaunchLayerNormBackward(const void* x, int xdt, const void* gamma, int gdt,
                                    const void* mean, const void* rstd, int sdt, const void* dy,
                                    int dydt, int64_t rows, int64_t cols, void* dx, void* dgamma,
                                    void* dbeta, Stream s) {
  if (rows == 0) return "";
  if (xdt == kF64) {
    LAUNCH(LayerNormBackwardRowsKernel<double>, rows, kThreads, S(s), x, xdt, gamma, gdt, mean,
           rstd, sdt, dy, dydt, cols, dx);
    LAUNCH(LayerNormBackwardColumnsKernel<double>, Blocks(cols), kThreads, S(s), x, xdt, mean, rstd,
           sdt, dy, dydt, rows, cols, dgamma, dbeta, gdt);
  } else {
    LAUNCH(LayerNormBackwardRowsKernel<float>, rows, kThreads, S(s), x, xdt, gamma, gdt, mean, rstd,
           sdt, dy, dydt, cols, dx);
    LAUNCH(LayerNormBackwardColumnsKernel<float>, Blocks(cols), kThreads, S(s), x, xdt, mean, rstd,
           sdt, dy, dydt, rows, cols, dgamma, dbeta, gdt);
  }
  return Check("LayerNormBackward");
}

std::string LaunchSoftmaxCrossEntropy(const void* logits, int dt, const int32_t* labels,
                                      int64_t rows, int64_t cols, void* lse, int ldt,
                                      double* row_loss, double* scratch, void* out, int odt,
                                      Stream s) {
  if (rows == 0) return "";
  if (dt == kF64) {
    LAUNCH(SoftmaxCrossEntropyRowsKernel<double>, rows, kThreads, S(s), logits, dt, labels, cols,
           lse, ldt, row_loss);
  } else {
    LAUNCH(SoftmaxCrossEntropyRowsKernel<float>, rows, kThreads, S(s), logits, dt, labels, cols,
           lse, ldt, row_loss);
  }
  const int blocks = ReduceBlocks(rows);
  LAUNCH(PartialSumKernel, blocks, kThreads, S(s), row_loss, kF64, rows, false, scratch);
  LAUNCH(FinishSumKernel, 1, 1, S(s), scratch, blocks, 1.0 / static_cast<double>(rows), nullptr,
         out, odt);
  return Check("SoftmaxCrossEntropy");
}

std::string LaunchSoftmaxCrossEntropyBackward(const void* logits, int dt, const int32_t* labels,
                                              const void* lse, int ldt, int64_t rows, int64_t cols,
                                              const void* dloss, int ddt, void* dx, Stream s) {
  const int64_t n = rows * cols;
  if (n == 0) return "";
  if (dt == kF64) {
    LAUNCH(SoftmaxCrossEntropyBackwardKernel<double>, Blocks(n), kThreads, S(s), logits, dt, labels,
           lse, ldt, rows, cols, dloss, ddt, dx);
  } else {
    LAUNCH(SoftmaxCrossEntropyBackwardKernel<float>, Blocks(n), kThreads, S(s), logits, dt, labels,
           lse, ldt, rows, cols, dloss, ddt, dx);
  }
  return Check("SoftmaxCrossEntropyBackwardKernel");
}

std::string LaunchEmbedding(const void* table, int dt, const int32_t* ids, int64_t n, int64_t dim,
                            void* y, Stream s) {
  if (n * dim == 0) return "";
  LAUNCH(EmbeddingKernel, Blocks(n * dim), kThreads, S(s), table, dt, ids, n, dim, y);
  return Check("EmbeddingKernel");
}

std::string LaunchEmbeddingBackward(const void* dy, int dt, const int32_t* ids, int64_t n,
                                    int64_t dim, int64_t rows, double* acc, void* dtable,
                                    Stream s) {
  if (rows * dim == 0) return "";
  cudaError_t err = cudaMemsetAsync(acc, 0, rows * dim * sizeof(double), S(s));
  if (err != cudaSuccess)
    return std::string("cudaMemsetAsync(embedding grad): ") + cudaGetErrorString(err);
  LAUNCH(EmbeddingBackwardKernel, Blocks(dim), kThreads, S(s), dy, dt, ids, n, dim, acc);
  LAUNCH(ConvertKernel<double>, Blocks(rows * dim), kThreads, S(s), acc, kF64, dtable, dt,
         rows * dim);
  return Check("EmbeddingBackward");
}

std::string LaunchDropout(const void* x, int dt, double p, uint64_t seed, void* y, int64_t n,
                          Stream s) {
  if (n == 0) return "";
  LAUNCH(DropoutKernel, Blocks(n), kThreads, S(s), x, dt, p, seed, y, n);
  return Check("DropoutKernel");
}

namespace {
int64_t MaxNumel(const TensorList& list) {
  int64_t m = 1;
  for (int i = 0; i < list.count; ++i) m = std::max(m, list.numel[i]);
  return m;
}

// The multiplier is 1/scale[0] when scale is given, else factor.
std::string MultiplyAndCheck(const TensorList& grads, const float* scale, float factor,
                             float* found_inf, Stream s) {
  if (grads.count == 0) return "";
  dim3 grid(std::min(Blocks(MaxNumel(grads)), 1024), grads.count);
  LAUNCH(UnscaleAndCheckKernel, grid, kThreads, S(s), grads, scale, factor, found_inf);
  return Check("UnscaleAndCheckKernel");
}

}  // namespace

std::string LaunchUnscaleAndCheck(const TensorList& grads, const float* scale, float* found_inf,
                                  Stream s) {
  return MultiplyAndCheck(grads, scale, 1.0f, found_inf, s);
}

std::string LaunchMultiplyAndCheck(const TensorList& grads, float factor, float* found_inf,
                                   Stream s) {
  return MultiplyAndCheck(grads, nullptr, factor, found_inf, s);
}

std::string LaunchUpdateScale(float* scale, float* growth_tracker, const float* found_inf,
                              double growth_factor, double backoff_factor, int64_t growth_interval,
                              double min_scale, double max_scale, Stream s) {
  LAUNCH(UpdateScaleKernel, 1, 1, S(s), scale, growth_tracker, found_inf,
         static_cast<float>(growth_factor), static_cast<float>(backoff_factor), growth_interval,
         static_cast<float>(min_scale), static_cast<float>(max_scale));
  return Check("UpdateScaleKernel");
}

std::string LaunchSumOfSquares(const TensorList& tensors, double* scratch, bool accumulate,
                               void* out, int odt, Stream s) {
  if (!accumulate) {
    cudaError_t err = cudaMemsetAsync(scratch + kMaxReduceBlocks, 0, sizeof(double), S(s));
    if (err != cudaSuccess)
      return std::string("cudaMemsetAsync(sum of squares): ") + cudaGetErrorString(err);
  }
  if (tensors.count == 0) {
    LAUNCH(FinishSumKernel, 1, 1, S(s), scratch, 0, 1.0, scratch + kMaxReduceBlocks, out, odt);
    return Check("FinishSumKernel");
  }
  const int per_tensor =
      std::max(1, std::min(ReduceBlocks(MaxNumel(tensors)), kMaxReduceBlocks / tensors.count));
  dim3 grid(per_tensor, tensors.count);
  LAUNCH(MultiSumOfSquaresKernel, grid, kThreads, S(s), tensors, per_tensor, scratch);
  LAUNCH(FinishSumKernel, 1, 1, S(s), scratch, per_tensor * tensors.count, 1.0,
         scratch + kMaxReduceBlocks, out, odt);
  return Check("SumOfSquares");
}

std::string LaunchSgdStep(void* param, int pdt, const void* grad, int gdt, float* momentum,
                          int64_t n, const SgdArgs& a, const float* found_inf, void* model_copy,
                          int mdt, Stream s) {
  if (n == 0) return "";
  LAUNCH(SgdStepKernel, Blocks(n), kThreads, S(s), param, pdt, grad, gdt, momentum, n, a, found_inf,
         model_copy, mdt);
  return Check("SgdStepKernel");
}

std::string LaunchAdamWStep(void* param, int pdt, const void* grad, int gdt, float* exp_avg,
                            float* exp_avg_sq, int64_t n, const AdamWArgs& a, const float* step_ptr,
                            const float* found_inf, void* model_copy, int mdt, Stream s) {
  if (n == 0) return "";
  LAUNCH(AdamWStepKernel, Blocks(n), kThreads, S(s), param, pdt, grad, gdt, exp_avg, exp_avg_sq, n,
         a, step_ptr, found_inf, model_copy, mdt);
  return Check("AdamWStepKernel");
}

}  // namespace ampd::engine::cuda
