#ifndef AMPD_ENGINE_OPS_OP_DEF_H_
#define AMPD_ENGINE_OPS_OP_DEF_H_

// The full op descriptor: op_list.h's row (id, name, cast policy) and the
// op's gradient, one constexpr table built from the same X-macro row. An op's
// forward records what its gradient needs (SavedForBackward) with RecordOp;
// autograd then calls the descriptor's gradient, so an op cannot be recorded
// with a backward that is not its own.

#include <cstdint>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::ops {

// What a forward keeps for its gradient (torch.autograd.Function's ctx).
struct SavedForBackward {
  OpId op = OpId::kCast;          // the op recorded (which one of a family)
  std::vector<Tensor> inputs{};   // the op's inputs as it ran (after autocast)
  std::vector<Tensor> tensors{};  // results it keeps (softmax's y, layer norm's mean/rstd)
  std::vector<int32_t> ids{};     // labels or embedding ids
  double scalar = 0;              // a factor (mul_scalar, mean's 1/n) or dropout's p
  uint64_t seed = 0;              // dropout's mask
  bool flag = false;              // log-softmax
  int64_t count = 0;              // the embedding table's rows, attention's heads
  int64_t length = 0;             // attention's sequence length
  std::vector<int64_t> params{};  // integer parameters (conv's stride, a pool's window)
};

// Gradients with respect to each input, in input order (undefined = none).
using GradientFn = std::vector<Tensor> (*)(const SavedForBackward& saved,
                                           const Tensor& grad_output);

// Each op's gradient, defined in its op file (op_list.h names them).
#define AMPD_ENGINE_OP_GRADIENT_DECL(id, name, policy, gradient) \
  std::vector<Tensor> gradient(const SavedForBackward& saved, const Tensor& grad_output);
AMPD_ENGINE_OPS(AMPD_ENGINE_OP_GRADIENT_DECL)
#undef AMPD_ENGINE_OP_GRADIENT_DECL

struct OpDef {
  OpDescriptor descriptor;
  GradientFn gradient;
};

inline constexpr OpDef kOpDefs[] = {
#define AMPD_ENGINE_OP_DEF(id, name, policy, gradient) \
  {{OpId::id, name, CastPolicy::policy}, &gradient},
    AMPD_ENGINE_OPS(AMPD_ENGINE_OP_DEF)
#undef AMPD_ENGINE_OP_DEF
};
static_assert(sizeof(kOpDefs) / sizeof(kOpDefs[0]) == kNumOps, "one definition per op");

constexpr const OpDef& Define(OpId op) { return kOpDefs[static_cast<int>(op)]; }

// Attaches `op`'s gradient (from its descriptor) to `output` when recording
// is on and an input requires grad; saved.op is set to `op`.
Tensor RecordOp(Tensor output, OpId op, SavedForBackward saved);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_OP_DEF_H_
