#ifndef AMPD_ENGINE_OPS_GELU_MLP_H_
#define AMPD_ENGINE_OPS_GELU_MLP_H_

// GPT-2's MLP, c_proj(gelu_tanh(c_fc(x))), as one op where it can be one
// (gelu_tanh_mlp, op_list.h), so that a device fuses the GELU into the GEMMs
// beside it: cuBLASLt's GELU_AUX_BIAS epilogue in c_fc's forward and
// DGELU_BGRAD in c_proj's input gradient (backend/kernels/gelu_mlp.h).
//
// It is the three ops, linear, gelu_tanh and linear, to the user: each casts
// under autocast as its own op would, in its own layer (so `fp32_layers` and
// `op_policies` apply as before), and explain plans list the three rows. It
// runs fused when the three compute in one dtype and the device has the
// fused kernels; otherwise it runs the three ops. On the CPU the fused
// kernels are the three ops' own kernel calls, so its results are bitwise
// the unfused ones; a GPU's epilogue rounds once where the ops round twice
// (the GEMM's result, then the GELU's).

#include <string>

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

struct MlpLinear {
  Tensor weight;      // [out, in]
  Tensor bias;        // [out], or undefined
  std::string layer;  // its name for LayerScope ("h.0.mlp.c_fc")
};

// x [M, C] -> [M, C]: fc's linear, GELU (tanh), proj's linear.
Tensor GeluTanhMlp(Tensor x, const MlpLinear& fc, const MlpLinear& proj);

// Whether GeluTanhMlp(x, fc, proj) would run as one op here (this autocast
// region and these layers, x's device).
bool GeluTanhMlpFuses(const Tensor& x, const MlpLinear& fc, const MlpLinear& proj);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_GELU_MLP_H_
