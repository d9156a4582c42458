#ifndef AMPD_ENGINE_BACKEND_KERNELS_FP8_H_
#define AMPD_ENGINE_BACKEND_KERNELS_FP8_H_

// FP8 kernels (kernel_registry.h): the cast into FP8 with a scale and the
// amax it records, the decode back, and the once-per-step scaling update of
// every FP8 tensor together (backend/fp8_scaling.h). The cast and decode are
// the FP8 linear's (ops/fp8_linear.h); the trainer asks for the update by
// name. Every backend computes the same bits
// (core/fp8.h and Fp8ScaleFromAmax are shared with the CUDA kernels).
//
// Scaling state is laid out as Transformer Engine's: amax_history is
// [amax_history_len, n] f32 (row 0: this step's amaxes, one column per FP8
// tensor), scales, scale_invs and scaled_max are [n] f32, on the device.

#include <cstdint>

#include "engine/backend/fp8_scaling.h"
#include "engine/backend/kernel_registry.h"
#include "engine/core/fp8.h"
#include "engine/core/tensor.h"

namespace ampd::engine::backend {

// codes = FP8(x * scales[index]), saturating, round-to-nearest-even (u8, x's
// shape; f32, f16 or bf16 x); and amax_history[0, index] = max(itself,
// max |x|), NaNs passed over (fmaxf, as TE). With `saturated` defined ([n]
// f64), saturated[index] += the values the cast clipped to +-fp8_max (|x *
// scale| beyond it; NaNs are not).
struct Fp8CastKernel {
  static constexpr const char* kName = "fp8_cast";
  static constexpr OpId kOps[] = {OpId::kFp8Linear};
  using Fn = Tensor (*)(const Tensor& x, core::Fp8Format format, const Tensor& scales,
                        const Tensor& amax_history, int64_t index, const Tensor& saturated);
};

// y = decode(codes) * scale_invs[index], rounded once to `dtype` (f32, f16 or
// bf16): what the CPU's emulated FP8 GEMM multiplies.
struct Fp8DecodeKernel {
  static constexpr const char* kName = "fp8_decode";
  static constexpr OpId kOps[] = {OpId::kFp8Linear};
  using Fn = Tensor (*)(const Tensor& codes, core::Fp8Format format, const Tensor& scale_invs,
                        int64_t index, DType dtype);
};

// The FP8 GEMM: y [m, n] = decode(a) [m, k] @ decode(b) [n, k]^T (+ bias),
// the decodes' scales scale_invs[ia] and scale_invs[ib], f32 accumulation,
// rounded once to `out` (f32, f16 or bf16; bias [n] f32 or undefined). Both
// operands K-contiguous (cuBLASLt's "TN", the only FP8 layout on Hopper):
// the linear's backward passes transposed codes (Fp8CastTransposeKernel). The
// CPU decodes and runs its f32 GEMM (the reference); CUDA runs cuBLASLt's FP8
// GEMM where it applies (engine/cuda/fp8.cc says when) and the CPU's way
// otherwise.
struct Fp8MatmulKernel {
  static constexpr const char* kName = "fp8_matmul";
  static constexpr OpId kOps[] = {OpId::kFp8Linear};
  using Fn = Tensor (*)(const Tensor& a, core::Fp8Format a_format, const Tensor& b,
                        core::Fp8Format b_format, const Tensor& scale_invs, int64_t a_index,
                        int64_t b_index, const Tensor& bias, DType out);
};

// Fp8CastKernel's cast of a 2-D x [rows, cols] that also writes the codes
// transposed, [cols, rows], in the same pass (Transformer Engine's
// cast-transpose): the K-contiguous copies the FP8 GEMMs of the backward
// need ("TN"), without reading x again. The amax and clipped count are the
// cast's.
struct Fp8CastTransposeResult {
  Tensor codes;       // [rows, cols] u8
  Tensor transposed;  // [cols, rows] u8
};
template <typename F>
Fp8CastTransposeResult MapTensors(const Fp8CastTransposeResult& r, F f) {
  return {f(r.codes), f(r.transposed)};
}
struct Fp8CastTransposeKernel {
  static constexpr const char* kName = "fp8_cast_transpose";
  static constexpr OpId kOps[] = {OpId::kFp8Linear};
  using Fn = Fp8CastTransposeResult (*)(const Tensor& x, core::Fp8Format format,
                                        const Tensor& scales, const Tensor& amax_history,
                                        int64_t index, const Tensor& saturated);
};

// UpdateFp8ScalingColumn for every column of amax_history.
struct Fp8UpdateScalingKernel {
  static constexpr const char* kName = "fp8_update_scaling";
  using Fn = void (*)(const Tensor& amax_history, const Tensor& scales, const Tensor& scale_invs,
                      const Tensor& scaled_max, AmaxAlgo algo);
};

}  // namespace ampd::engine::backend

#endif  // AMPD_ENGINE_BACKEND_KERNELS_FP8_H_
