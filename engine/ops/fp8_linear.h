#ifndef AMPD_ENGINE_OPS_FP8_LINEAR_H_
#define AMPD_ENGINE_OPS_FP8_LINEAR_H_

// The FP8 linear, as Transformer Engine's: y = x w^T + b with x and w cast to
// FP8 (E4M3) by their own scales, and in the backward the output gradient
// cast too (E5M2 in the HYBRID recipe); dgrad and wgrad are GEMMs of FP8
// values, all with f32 accumulation; the bias gradient comes from the
// unquantized output gradient. Each cast records its tensor's amax into this
// step's row of the amax history (backend/fp8_scaling.h); the scales are
// whatever the last update left (delayed scaling). With current scaling each
// tensor's scale comes from its own amax first: a cast records it, every
// column is updated from row 0 (a history of one: the other columns get the
// scales they already had, from the same amax, or keep theirs where row 0 is
// already 0), and the tensor is cast again with its new scale.
//
// The GEMMs run on the decoded values (fp8_decode: code * 1/scale, in f32)
// with the backend's f32 GEMM: on the CPU this is the emulation the issue
// asks for (the same quantization bit for bit, not a fast path); a GPU with
// FP8 tensor cores runs it natively.

#include <cstdint>

#include "engine/core/fp8.h"
#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// Where one FP8 linear keeps its scaling: columns index (x), index + 1 (w)
// and index + 2 (the output gradient) of the [len, n] amax history and of
// the [n] scales and inverse scales (f32, on x's device).
struct Fp8LinearScaling {
  Tensor amax_history;
  Tensor scales;
  Tensor scale_invs;
  int64_t index = 0;
  core::Fp8Format forward = core::Fp8Format::kE4M3;   // x and w
  core::Fp8Format backward = core::Fp8Format::kE5M2;  // the output gradient
  // Current scaling (a history of one row): scaled_max is the [n]
  // fp8_max * 2^-margin of every column, for the update before each cast.
  bool current = false;
  Tensor scaled_max;
  // [n] f64, optional: each cast adds the values it clipped to +-fp8_max to
  // its column (the scaling record's saturation counts).
  Tensor saturated;
};

// x [M, in], w [out, in], b [out] (may be undefined); y in the region's dtype
// (autocast: bf16 or f16; f32 outside).
Tensor Fp8Linear(Tensor x, Tensor w, Tensor b, const Fp8LinearScaling& scaling);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_FP8_LINEAR_H_
