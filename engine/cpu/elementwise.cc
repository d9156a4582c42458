// The CPU backend: Elementwise kernels: casts, the unary and binary families, scaling, dropout.

#include "engine/backend/kernels/elementwise.h"

#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/cpu/avx512_math.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/dropout_mask.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

using backend::AddInPlaceKernel;
using backend::BinaryKernel;
using backend::CastKernel;
using backend::DropoutKeep;
using backend::DropoutKernel;
using backend::KernelMethod;
using backend::ScaleKernel;
using backend::UnaryBackwardKernel;
using backend::UnaryKernel;
using ops::IsBinaryOp;
using ops::IsUnaryOp;

namespace {

#ifdef AMPD_HAS_AVX512_KERNELS
// GELU tanh as kernel_util.h's ApplyUnary/UnaryDerivative compute it,
// x * sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3), 16 values at a
// time with Exp16 instead of one libm call each (the GPT's MLP: 4C values
// per token, forward and backward).
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

// e^(-2u) for 16 values.
AMPD_AVX512 inline __m512 GeluTanhExp(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 poly =
      _mm512_fmadd_ps(_mm512_set1_ps(-2 * kGeluK * 0.044715f), x2, _mm512_set1_ps(-2 * kGeluK));
  return Exp16(_mm512_mul_ps(x, poly));
}

AMPD_AVX512 void GeluTanhAvx512(const float* x, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(v, _mm512_add_ps(one, GeluTanhExp(v))));
  }
}

// dy * (s + 2 x s (1 - s) du/dx), s = sigmoid(2u).
AMPD_AVX512 void GeluTanhBackwardAvx512(const float* x, const float* dy, float* dx, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = FirstLanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, GeluTanhExp(v)));
    const __m512 du =
        _mm512_mul_ps(_mm512_set1_ps(kGeluK),
                      _mm512_fmadd_ps(_mm512_set1_ps(3 * 0.044715f), _mm512_mul_ps(v, v), one));
    const __m512 two_x_s_1ms =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(v, v), s), _mm512_sub_ps(one, s));
    const __m512 d = _mm512_fmadd_ps(two_x_s_1ms, du, s);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, dy + i)));
  }
}
#endif

}  // namespace

Tensor CpuBackendImpl::Cast(const Tensor& x, DType dtype) {
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

Tensor CpuBackendImpl::Unary(OpId op, const Tensor& x) {
  if (!IsUnaryOp(op)) NotInFamily(op, "unary");
  return UsesDouble(x) ? UnaryImpl<double>(op, x) : UnaryImpl<float>(op, x);
}

template <typename C>
Tensor CpuBackendImpl::UnaryImpl(OpId op, const Tensor& x) {
  if constexpr (std::is_same_v<C, float>) {
    Tensor y = Tensor::Uninitialized(x.shape(), x.dtype());
#ifdef AMPD_HAS_AVX512_KERNELS
    if (op == OpId::kGeluTanh && UseAvx512Kernels()) {
      ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
        float in_buf[kBlock], out_buf[kBlock];
        const float* xs = LoadBlock(x, begin, len, in_buf);
        float* ys = DestBlock(y, begin, out_buf);
        GeluTanhAvx512(xs, ys, len);
        StoreBlock(ys, y, begin, len);
      });
      return y;
    }
#endif
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

Tensor CpuBackendImpl::UnaryBackward(OpId op, const Tensor& x, const Tensor& dy) {
  if (!IsUnaryOp(op)) NotInFamily(op, "unary");
  return UsesDouble(x) ? UnaryBackwardImpl<double>(op, x, dy) : UnaryBackwardImpl<float>(op, x, dy);
}

template <typename C>
Tensor CpuBackendImpl::UnaryBackwardImpl(OpId op, const Tensor& x, const Tensor& dy) {
  if constexpr (std::is_same_v<C, float>) {
    Tensor dx = Tensor::Uninitialized(x.shape(), dy.dtype());
#ifdef AMPD_HAS_AVX512_KERNELS
    if (op == OpId::kGeluTanh && UseAvx512Kernels()) {
      ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
        float x_buf[kBlock], g_buf[kBlock], out_buf[kBlock];
        const float* xs = LoadBlock(x, begin, len, x_buf);
        const float* gs = LoadBlock(dy, begin, len, g_buf);
        float* out = DestBlock(dx, begin, out_buf);
        GeluTanhBackwardAvx512(xs, gs, out, len);
        StoreBlock(out, dx, begin, len);
      });
      return dx;
    }
#endif
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

Tensor CpuBackendImpl::Binary(OpId op, const Tensor& a, const Tensor& b, DType out) {
  if (!IsBinaryOp(op)) NotInFamily(op, "binary");
  return (UsesDouble(a) || UsesDouble(b) || out == DType::kF64) ? BinaryImpl<double>(op, a, b, out)
                                                                : BinaryImpl<float>(op, a, b, out);
}

template <typename C>
Tensor CpuBackendImpl::BinaryImpl(OpId op, const Tensor& a, const Tensor& b, DType out) {
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

Tensor CpuBackendImpl::BinaryFloat(OpId op, const Tensor& a, const Tensor& b, DType out) {
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

Tensor CpuBackendImpl::Scale(const Tensor& x, double factor, DType out) {
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

void CpuBackendImpl::AddInPlace(const Tensor& x, const Tensor& y, double alpha) {
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
      out[i] = static_cast<float>(static_cast<double>(xs[i]) + alpha * static_cast<double>(ys[i]));
    }
    StoreBlock(out, x, begin, len);
  });
}

Tensor CpuBackendImpl::Dropout(const Tensor& x, double p, uint64_t seed) {
  if (UsesDouble(x)) return DropoutImpl<double>(x, p, seed);
  return DropoutImpl<float>(x, p, seed);
}

template <typename C>
Tensor CpuBackendImpl::DropoutImpl(const Tensor& x, double p, uint64_t seed) {
  if constexpr (std::is_same_v<C, float>) {
    Tensor y = Tensor::Uninitialized(x.shape(), x.dtype());
    const float keep_scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
#ifdef AMPD_HAS_AVX512_KERNELS
    const bool vector = UseAvx512DropoutMask() && p < 1;
#else
    const bool vector = false;
#endif
    ForBlocks(x.numel(), [&](int64_t begin, int64_t len) {
      float in_buf[kBlock], out_buf[kBlock];
      const float* __restrict xs = LoadBlock(x, begin, len, in_buf);
      float* __restrict ys = DestBlock(y, begin, out_buf);
      if (vector) {
#ifdef AMPD_HAS_AVX512_KERNELS
        // The same mask 16 at a time (DropoutKeep's rule in integers).
        DropoutRow16(seed, begin, backend::DropoutThreshold(p), keep_scale, xs, ys, len);
#endif
      } else {
        for (int64_t i = 0; i < len; ++i) {
          ys[i] = DropoutKeep(seed, begin + i, p) ? xs[i] * keep_scale : 0.0f;
        }
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

AMPD_REGISTER_KERNEL(CastKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Cast>::Call);
AMPD_REGISTER_KERNEL(UnaryKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Unary>::Call);
AMPD_REGISTER_KERNEL(UnaryBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::UnaryBackward>::Call);
AMPD_REGISTER_KERNEL(BinaryKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Binary>::Call);
AMPD_REGISTER_KERNEL(ScaleKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Scale>::Call);
AMPD_REGISTER_KERNEL(AddInPlaceKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::AddInPlace>::Call);
AMPD_REGISTER_KERNEL(DropoutKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Dropout>::Call);

}  // namespace ampd::engine::cpu
