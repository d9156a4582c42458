#include "engine/ops/fp8_linear.h"

#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/fp8.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::CastKernel;
using backend::Fp8CastKernel;
using backend::Fp8CastTransposeKernel;
using backend::Fp8CastTransposeResult;
using backend::Fp8MatmulKernel;
using backend::Fp8UpdateScalingKernel;
using backend::Kernel;
using backend::SumRowsKernel;
using core::Fp8Format;

namespace {

// What the gradient needs besides the inputs: the transposed codes of x and
// w (the backward's GEMMs take them K-contiguous), the scaling tensors
// (tensors), the first column (count) and the formats (ids).
enum SavedTensor { kXCodesT, kWCodesT, kHistory, kScales, kScaleInvs, kScaledMax, kSaturated };

// FP8 codes of x for `column`, and the same transposed (one pass): with
// current scaling (scaled_max defined) its scale is set from its own amax
// first (see fp8_linear.h).
Fp8CastTransposeResult CastFp8(const Tensor& x, Fp8Format format, const Tensor& history,
                               const Tensor& scales, const Tensor& invs, const Tensor& scaled_max,
                               const Tensor& saturated, int64_t column) {
  const Device dev = x.device();
  if (scaled_max.defined()) {  // records amax(x) in row 0
    (void)Kernel<Fp8CastKernel>(dev)(x, format, scales, history, column, Tensor());
    Kernel<Fp8UpdateScalingKernel>(dev)(history, scales, invs, scaled_max,
                                        backend::AmaxAlgo::kMostRecent);
  }
  return Kernel<Fp8CastTransposeKernel>(dev)(x, format, scales, history, column, saturated);
}

Fp8Format FormatOf(int32_t code) { return code == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2; }
int32_t CodeOf(Fp8Format f) { return f == Fp8Format::kE4M3 ? 0 : 1; }

}  // namespace

Tensor Fp8Linear(Tensor x, Tensor w, Tensor b, const Fp8LinearScaling& s) {
  OpDispatch d(OpId::kFp8Linear, {&x, &w, &b});
  const Device dev = x.device();
  const Tensor scaled_max = s.current ? s.scaled_max : Tensor();
  const Fp8CastTransposeResult xc = CastFp8(x, s.forward, s.amax_history, s.scales, s.scale_invs,
                                            scaled_max, s.saturated, s.index);
  const Fp8CastTransposeResult wc = CastFp8(w, s.forward, s.amax_history, s.scales, s.scale_invs,
                                            scaled_max, s.saturated, s.index + 1);
  Tensor bias = b.defined() ? Kernel<CastKernel>(dev)(b, DType::kF32) : Tensor();
  // y [M, out] = x [M, in] @ w [out, in]^T: both K-contiguous as they are.
  Tensor y = Kernel<Fp8MatmulKernel>(dev)(xc.codes, s.forward, wc.codes, s.forward, s.scale_invs,
                                          s.index, s.index + 1, bias, d.compute_dtype());
  d.set_fp8({s.forward, s.forward, s.backward, s.current});
  d.Finish(y);
  return RecordOp(y, OpId::kFp8Linear,
                  {.inputs = {x, w, b},
                   .tensors = {xc.transposed, wc.transposed, s.amax_history, s.scales, s.scale_invs,
                               scaled_max, s.saturated},
                   .ids = {CodeOf(s.forward), CodeOf(s.backward)},
                   .count = s.index});
}

std::vector<Tensor> Fp8LinearGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor &x = s.inputs[0], &w = s.inputs[1], &b = s.inputs[2];
  const Device dev = x.device();
  const Fp8Format forward = FormatOf(s.ids[0]), backward = FormatOf(s.ids[1]);
  const Tensor &history = s.tensors[kHistory], &scales = s.tensors[kScales],
               &invs = s.tensors[kScaleInvs];
  const int64_t i = s.count;
  const Fp8CastTransposeResult gc = CastFp8(g, backward, history, scales, invs,
                                            s.tensors[kScaledMax], s.tensors[kSaturated], i + 2);
  // The FP8 GEMMs take K-contiguous operands ("TN"): the transposed codes.
  auto fp8_matmul = Kernel<Fp8MatmulKernel>(dev);
  // dgrad: dx [M, in] = g [M, out] @ w [out, in] = g @ (w^T [in, out])^T
  Tensor dx = fp8_matmul(gc.codes, backward, s.tensors[kWCodesT], forward, invs, i + 2, i + 1,
                         Tensor(), x.dtype());
  // wgrad: dw [out, in] = g^T [out, M] @ x [M, in] = g^T @ (x^T [in, M])^T
  Tensor dw = fp8_matmul(gc.transposed, backward, s.tensors[kXCodesT], forward, invs, i + 2, i,
                         Tensor(), w.dtype());
  Tensor db = b.defined() ? Kernel<SumRowsKernel>(dev)(g, b.dtype()) : Tensor();
  return {dx, dw, db};
}

}  // namespace ampd::engine::ops
