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
using backend::Fp8DecodeKernel;
using backend::Fp8UpdateScalingKernel;
using backend::Kernel;
using backend::LinearKernel;
using backend::MatmulKernel;
using backend::SumRowsKernel;
using core::Fp8Format;

namespace {

// What the gradient needs besides the inputs: the codes of x and w, the
// scaling tensors (tensors), the first column (count) and the formats (ids).
enum SavedTensor { kXCodes, kWCodes, kHistory, kScales, kScaleInvs, kScaledMax, kSaturated };

// FP8 codes of x for `column`: with current scaling (scaled_max defined) its
// scale is set from its own amax first (see fp8_linear.h).
Tensor CastFp8(const Tensor& x, Fp8Format format, const Tensor& history, const Tensor& scales,
               const Tensor& invs, const Tensor& scaled_max, const Tensor& saturated,
               int64_t column) {
  const Device dev = x.device();
  auto cast = Kernel<Fp8CastKernel>(dev);
  if (scaled_max.defined()) {
    (void)cast(x, format, scales, history, column, Tensor());  // records amax(x) in row 0
    Kernel<Fp8UpdateScalingKernel>(dev)(history, scales, invs, scaled_max,
                                        backend::AmaxAlgo::kMostRecent);
  }
  return cast(x, format, scales, history, column, saturated);
}

Fp8Format FormatOf(int32_t code) { return code == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2; }
int32_t CodeOf(Fp8Format f) { return f == Fp8Format::kE4M3 ? 0 : 1; }

}  // namespace

Tensor Fp8Linear(Tensor x, Tensor w, Tensor b, const Fp8LinearScaling& s) {
  OpDispatch d(OpId::kFp8Linear, {&x, &w, &b});
  const Device dev = x.device();
  auto decode = Kernel<Fp8DecodeKernel>(dev);
  const Tensor scaled_max = s.current ? s.scaled_max : Tensor();
  Tensor x_codes = CastFp8(x, s.forward, s.amax_history, s.scales, s.scale_invs, scaled_max,
                           s.saturated, s.index);
  Tensor w_codes = CastFp8(w, s.forward, s.amax_history, s.scales, s.scale_invs, scaled_max,
                           s.saturated, s.index + 1);
  Tensor xd = decode(x_codes, s.forward, s.scale_invs, s.index, DType::kF32);
  Tensor wd = decode(w_codes, s.forward, s.scale_invs, s.index + 1, DType::kF32);
  Tensor bias = b.defined() ? Kernel<CastKernel>(dev)(b, DType::kF32) : Tensor();
  Tensor y = Kernel<LinearKernel>(dev)(xd, wd, bias, d.compute_dtype());
  d.set_fp8({s.forward, s.forward, s.backward, s.current});
  d.Finish(y);
  return RecordOp(y, OpId::kFp8Linear,
                  {.inputs = {x, w, b},
                   .tensors = {x_codes, w_codes, s.amax_history, s.scales, s.scale_invs, scaled_max,
                               s.saturated},
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
  auto decode = Kernel<Fp8DecodeKernel>(dev);
  Tensor g_codes = CastFp8(g, backward, history, scales, invs, s.tensors[kScaledMax],
                           s.tensors[kSaturated], i + 2);
  Tensor gd = decode(g_codes, backward, invs, i + 2, DType::kF32);
  Tensor xd = decode(s.tensors[kXCodes], forward, invs, i, DType::kF32);
  Tensor wd = decode(s.tensors[kWCodes], forward, invs, i + 1, DType::kF32);
  auto matmul = Kernel<MatmulKernel>(dev);
  Tensor dx = matmul(gd, wd, false, false, x.dtype());  // dgrad: [M,out] @ [out,in]
  Tensor dw = matmul(gd, xd, true, false, w.dtype());   // wgrad: [out,M] @ [M,in]
  Tensor db = b.defined() ? Kernel<SumRowsKernel>(dev)(g, b.dtype()) : Tensor();
  return {dx, dw, db};
}

}  // namespace ampd::engine::ops
