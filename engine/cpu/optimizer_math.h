#ifndef AMPD_ENGINE_CPU_OPTIMIZER_MATH_H_
#define AMPD_ENGINE_CPU_OPTIMIZER_MATH_H_

// The f32 math of one block of an optimizer step (torch.optim semantics),
// shared by the 32-bit steps (optimizers.cc) and the 8-bit ones
// (optimizers8bit.cc), which differ only in how the states are stored.

#include <cmath>
#include <cstdint>

#include "engine/backend/device_amp.h"
#include "engine/cpu/avx512_math.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {

// AdamW with bias corrections: m, v updated in place, out = the new param
// (out may alias p: element i is read before it is written). Two forms of the
// same update, equal in exact arithmetic, differing in rounding:
//  - kTorch (the 32-bit steps): torch.optim.AdamW's
//      p * (1 - lr wd) - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps);
//  - kBitsandbytes (the 8-bit steps): bitsandbytes' 8-bit blockwise kernel's
//      p * (1 - lr wd) - (lr sqrt(bc2) / bc1) * (m / (sqrt(v) + eps sqrt(bc2))),
//    one division a value instead of two: the 8-bit step is bound by
//    computation where the 32-bit one is bound by memory, and a vector
//    division is the costliest operation in it (on Intel's AVX-512 units a
//    16-lane division takes the divider 8-10 cycles).
class AdamWBlockMath {
 public:
  enum class Form { kTorch, kBitsandbytes };

  explicit AdamWBlockMath(const backend::DeviceAmp::AdamWHyper& h, Form form = Form::kTorch)
      : form_(form),
        decay_(1.0f - h.lr * h.weight_decay),
        beta1_(h.beta1),
        beta2_(h.beta2),
        one_minus_beta1_(1.0f - h.beta1),
        one_minus_beta2_(1.0f - h.beta2) {
    const double step = static_cast<double>(h.step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), step));
    if (form == Form::kTorch) {
      step_size_ = static_cast<float>(h.lr / bc1);
      bc2_sqrt_ = static_cast<float>(bc2_sqrt);
      eps_ = h.eps;
    } else {
      step_size_ = static_cast<float>(h.lr * bc2_sqrt / bc1);
      bc2_sqrt_ = 1.0f;  // unused
      eps_ = static_cast<float>(static_cast<double>(h.eps) * bc2_sqrt);
    }
  }

  void Update(const float* __restrict gs, const float* ps, float* __restrict m, float* __restrict v,
              float* out, int64_t len) const {
#ifdef AMPD_HAS_AVX512_KERNELS
    if (UseAvx512Kernels()) {
      UpdateAvx512(gs, ps, m, v, out, len);
      return;
    }
#endif
    if (form_ == Form::kTorch) {
      AMPD_SIMD
      for (int64_t i = 0; i < len; ++i) {
        const float g = gs[i];
        m[i] = beta1_ * m[i] + one_minus_beta1_ * g;
        v[i] = beta2_ * v[i] + one_minus_beta2_ * g * g;
        const float denom = std::sqrt(v[i]) / bc2_sqrt_ + eps_;
        out[i] = ps[i] * decay_ - step_size_ * m[i] / denom;
      }
    } else {
      AMPD_SIMD
      for (int64_t i = 0; i < len; ++i) {
        const float g = gs[i];
        m[i] = beta1_ * m[i] + one_minus_beta1_ * g;
        v[i] = beta2_ * v[i] + one_minus_beta2_ * g * g;
        out[i] = ps[i] * decay_ - step_size_ * (m[i] / (std::sqrt(v[i]) + eps_));
      }
    }
  }

  // The constants Update uses, for kernels that fuse its arithmetic with
  // more (the 8-bit step's AVX-512 block, optimizers8bit.cc), operation for
  // operation. For kBitsandbytes, step_size and eps are the scaled ones and
  // bc2_sqrt is unused.
  struct Coefficients {
    float step_size, bc2_sqrt, decay, beta1, beta2, eps, one_minus_beta1, one_minus_beta2;
  };
  Coefficients coefficients() const {
    return {step_size_, bc2_sqrt_, decay_,           beta1_,
            beta2_,     eps_,      one_minus_beta1_, one_minus_beta2_};
  }
  Form form() const { return form_; }

 private:
  // The loops above 16 lanes at a time, with the same operations in the same
  // order and no contraction into FMAs: bit for bit the portable result
  // (tests/engine/cpu:vector_kernels_test).
  void UpdateAvx512(const float* gs, const float* ps, float* m, float* v, float* out,
                    int64_t len) const;

  Form form_;
  float step_size_, bc2_sqrt_, decay_, beta1_, beta2_, eps_, one_minus_beta1_, one_minus_beta2_;
};

// SGD with momentum (buf updated in place; `first` initialises it), weight
// decay and Nesterov.
inline void SgdMomentumBlock(const backend::DeviceAmp::SgdHyper& h, bool first,
                             const float* __restrict gs, const float* ps, float* __restrict buf,
                             float* out, int64_t len) {
  AMPD_SIMD
  for (int64_t i = 0; i < len; ++i) {
    float d = gs[i] + h.weight_decay * ps[i];
    buf[i] = first ? d : h.momentum * buf[i] + d;
    d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
    out[i] = ps[i] - h.lr * d;
  }
}

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_OPTIMIZER_MATH_H_
