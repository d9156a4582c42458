// The CPU backend's FP8 kernels (backend/kernels/fp8.h): the scalar
// conversions of core/fp8.h element by element. They are the reference the
// CUDA kernels are tested against, and the CPU's FP8 is an emulation for
// correctness (and trying FP8 anywhere), not a fast path.

#include "engine/backend/kernels/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/backend/kernels/matmul.h"
#include "engine/core/half.h"

namespace ampd::engine::cpu {
namespace {

using backend::AmaxAlgo;
using backend::Fp8CastKernel;
using backend::Fp8CastTransposeKernel;
using backend::Fp8CastTransposeResult;
using backend::Fp8DecodeKernel;
using backend::Fp8MatmulKernel;
using backend::Fp8TensorScaling;
using backend::Fp8UpdateScalingKernel;
using core::Fp8Format;

// The FP8 ops hand these kernels f32, f16 or bf16 only: anything else is a
// bug in the engine, not bad input.
[[noreturn]] void Unsupported(const char* kernel, DType dtype) {
  const std::string_view name = DTypeName(dtype);
  std::fprintf(stderr, "ampd: %s of the CPU backend takes f32, f16 or bf16, not %.*s\n", kernel,
               static_cast<int>(name.size()), name.data());
  std::abort();
}

float ValueAt(const Tensor& x, int64_t i) {
  switch (x.dtype()) {
    case DType::kF32:
      return x.data<float>()[i];
    case DType::kBF16:
      return core::BF16BitsToF32(x.data<uint16_t>()[i]);
    case DType::kF16:
      return core::F16BitsToF32(x.data<uint16_t>()[i]);
    default:
      Unsupported("fp8_cast", x.dtype());
  }
}

Tensor Fp8Cast(const Tensor& x, Fp8Format format, const Tensor& scales, const Tensor& amax_history,
               int64_t index, const Tensor& saturated) {
  Tensor codes = Tensor::Uninitialized(x.shape(), DType::kU8);
  uint8_t* out = codes.data<uint8_t>();
  const float scale = scales.data<float>()[index];
  const float max = core::Fp8Max(format);
  float amax = 0.0f;
  int64_t clipped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = ValueAt(x, i);
    amax = std::fmax(amax, std::fabs(v));
    const float scaled = v * scale;
    clipped += std::fabs(scaled) > max;  // false for NaN
    out[i] = core::F32ToFp8(scaled, format, /*saturate=*/true);
  }
  float& recorded = amax_history.data<float>()[index];
  recorded = std::fmax(recorded, amax);
  if (saturated.defined()) saturated.data<double>()[index] += static_cast<double>(clipped);
  return codes;
}

Tensor Fp8Decode(const Tensor& codes, Fp8Format format, const Tensor& scale_invs, int64_t index,
                 DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    Unsupported("fp8_decode", dtype);
  }
  Tensor y = Tensor::Uninitialized(codes.shape(), dtype);
  const uint8_t* in = codes.data<uint8_t>();
  const float scale_inv = scale_invs.data<float>()[index];
  for (int64_t i = 0; i < codes.numel(); ++i) {
    const float v = core::Fp8ToF32(in[i], format) * scale_inv;
    if (dtype == DType::kF32) {
      y.data<float>()[i] = v;
    } else if (dtype == DType::kBF16) {
      y.data<uint16_t>()[i] = core::F32ToBF16Bits(v);
    } else {
      y.data<uint16_t>()[i] = core::F32ToF16Bits(v);
    }
  }
  return y;
}

// The reference FP8 GEMM: the decoded values' f32 GEMM (what the FP8 linear
// computed before FP8 GEMMs existed, bit for bit in the forward).
Tensor Fp8Matmul(const Tensor& a, Fp8Format a_format, const Tensor& b, Fp8Format b_format,
                 const Tensor& scale_invs, int64_t a_index, int64_t b_index, const Tensor& bias,
                 DType out) {
  const Tensor ad = Fp8Decode(a, a_format, scale_invs, a_index, DType::kF32);
  const Tensor bd = Fp8Decode(b, b_format, scale_invs, b_index, DType::kF32);
  return backend::Kernel<backend::LinearKernel>(Device::kCpu)(ad, bd, bias, out);
}

// The cast, then its codes transposed (the reference: the same codes, the
// same amax and count).
Fp8CastTransposeResult Fp8CastTranspose(const Tensor& x, Fp8Format format, const Tensor& scales,
                                        const Tensor& amax_history, int64_t index,
                                        const Tensor& saturated) {
  Fp8CastTransposeResult r;
  r.codes = Fp8Cast(x, format, scales, amax_history, index, saturated);
  const int64_t rows = x.dim(0), cols = x.dim(1);
  r.transposed = Tensor::Uninitialized({cols, rows}, DType::kU8);
  const uint8_t* in = r.codes.data<uint8_t>();
  uint8_t* out = r.transposed.data<uint8_t>();
  constexpr int64_t kTile = 64;  // blocks, so both sides stay in cache
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      for (int64_t i = r0; i < std::min(rows, r0 + kTile); ++i) {
        for (int64_t j = c0; j < std::min(cols, c0 + kTile); ++j)
          out[j * rows + i] = in[i * cols + j];
      }
    }
  }
  return r;
}

void Fp8UpdateScaling(const Tensor& amax_history, const Tensor& scales, const Tensor& scale_invs,
                      const Tensor& scaled_max, AmaxAlgo algo) {
  const int64_t len = amax_history.shape()[0];
  const int64_t n = amax_history.shape()[1];
  for (int64_t c = 0; c < n; ++c) {
    backend::UpdateFp8ScalingColumn(
        Fp8TensorScaling{amax_history.data<float>() + c, scales.data<float>() + c,
                         scale_invs.data<float>() + c, n},
        len, algo, scaled_max.data<float>()[c]);
  }
}

}  // namespace

AMPD_REGISTER_KERNEL(Fp8CastKernel, Device::kCpu, Fp8Cast);
AMPD_REGISTER_KERNEL(Fp8DecodeKernel, Device::kCpu, Fp8Decode);
AMPD_REGISTER_KERNEL(Fp8MatmulKernel, Device::kCpu, Fp8Matmul);
AMPD_REGISTER_KERNEL(Fp8CastTransposeKernel, Device::kCpu, Fp8CastTranspose);
AMPD_REGISTER_KERNEL(Fp8UpdateScalingKernel, Device::kCpu, Fp8UpdateScaling);

}  // namespace ampd::engine::cpu
