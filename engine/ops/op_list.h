#ifndef AMPD_ENGINE_OPS_OP_LIST_H_
#define AMPD_ENGINE_OPS_OP_LIST_H_

// Every op of the engine, once: its id, its name, its autocast cast policy
// and its gradient. This list is the op's descriptor; the name is what explain plans,
// autograd nodes and precision overrides ("op_policies": {"gelu": "fp32"})
// use, and the policy table of autocast is built from it, so there is no
// other spelling to keep in sync. An op's forward and gradient live in
// engine/ops (ops/op_def.h: the full descriptor, with the gradient), its
// kernels in each backend (which says which ops it has: Backend::HasKernel). See engine/README.md,
// "How to add an op".
//
// Plain C++ with no includes beyond <cstdint>: the CUDA kernels (.cu) include
// it for the same op codes.
//
// Cast policies, modelled on torch.autocast's:
//   kLowerPrecision  f32 inputs are cast to the region's dtype (bf16 or f16).
//   kFp32            f16/bf16 inputs are cast to f32.
//   kPromote         inputs are cast to the widest input dtype.
//   kPassThrough     the op runs in its input dtype.

#include <cstdint>

namespace ampd::engine::ops {

enum class CastPolicy : uint8_t { kLowerPrecision, kFp32, kPromote, kPassThrough };

// X(id, name, cast policy, gradient). The gradient is the function of
// engine/ops that computes the op's backward (ops/op_def.h makes the table;
// here, where CUDA includes the list, it is only a name).
#define AMPD_ENGINE_OPS(X)                                                                     \
  X(kCast, "cast", kPassThrough, CastGradient)                                                 \
  X(kMatmul, "matmul", kLowerPrecision, MatmulGradient)                                        \
  X(kLinear, "linear", kLowerPrecision, LinearGradient)                                        \
  X(kAdd, "add", kPromote, BinaryGradient)                                                     \
  X(kSub, "sub", kPromote, BinaryGradient)                                                     \
  X(kMul, "mul", kPromote, BinaryGradient)                                                     \
  X(kMulScalar, "mul_scalar", kPassThrough, MulScalarGradient)                                 \
  X(kRelu, "relu", kPassThrough, UnaryGradient)                                                \
  X(kGelu, "gelu", kPassThrough, UnaryGradient)                                                \
  X(kGeluTanh, "gelu_tanh", kPassThrough, UnaryGradient) /* GPT-2 */                           \
  X(kNeg, "neg", kPassThrough, UnaryGradient)                                                  \
  X(kExp, "exp", kFp32, UnaryGradient)                                                         \
  X(kLog, "log", kFp32, UnaryGradient)                                                         \
  X(kSquare, "pow", kFp32, UnaryGradient) /* torch.pow(x, 2) */                                \
  X(kSoftmax, "softmax", kFp32, SoftmaxGradient)                                               \
  X(kLogSoftmax, "log_softmax", kFp32, SoftmaxGradient)                                        \
  X(kLayerNorm, "layer_norm", kFp32, LayerNormGradient)                                        \
  X(kCrossEntropy, "cross_entropy", kFp32, CrossEntropyGradient)                               \
  X(kSum, "sum", kFp32, SumGradient)                                                           \
  X(kMean, "mean", kFp32, MeanGradient)                                                        \
  X(kEmbedding, "embedding", kPassThrough, EmbeddingGradient)                                  \
  X(kDropout, "dropout", kPassThrough, DropoutGradient)                                        \
  X(kCausalAttention, "scaled_dot_product_attention", kLowerPrecision, AttentionGradient)      \
  X(kLmHeadCrossEntropy, "lm_head_cross_entropy", kLowerPrecision, LmHeadCrossEntropyGradient) \
  X(kFp8Linear, "fp8_linear", kLowerPrecision, Fp8LinearGradient) /* Transformer Engine's */   \
  X(kReshape, "reshape", kPassThrough, ReshapeGradient)           /* a view: no kernel */      \
  X(kConv2d, "conv2d", kLowerPrecision, Conv2dGradient)                                        \
  X(kMaxPool2d, "max_pool2d", kPassThrough, Pool2dGradient)                                    \
  X(kAvgPool2d, "avg_pool2d", kPassThrough, Pool2dGradient)                                    \
  X(kAdaptiveAvgPool2d, "adaptive_avg_pool2d", kPassThrough, Pool2dGradient)                   \
  X(kBatchNorm, "batch_norm", kFp32, BatchNormGradient)                                        \
  X(kGeluTanhMlp, "gelu_tanh_mlp", kLowerPrecision, GeluTanhMlpGradient) /* fused; see below */

enum class OpId : uint8_t {
#define AMPD_ENGINE_OP_ID(id, name, policy, gradient) id,
  AMPD_ENGINE_OPS(AMPD_ENGINE_OP_ID)
#undef AMPD_ENGINE_OP_ID
};

struct OpDescriptor {
  OpId id;
  const char* name;
  CastPolicy policy;
};

inline constexpr OpDescriptor kOpDescriptors[] = {
#define AMPD_ENGINE_OP_DESCRIPTOR(id, name, policy, gradient) {OpId::id, name, CastPolicy::policy},
    AMPD_ENGINE_OPS(AMPD_ENGINE_OP_DESCRIPTOR)
#undef AMPD_ENGINE_OP_DESCRIPTOR
};

inline constexpr int kNumOps = sizeof(kOpDescriptors) / sizeof(kOpDescriptors[0]);

constexpr const OpDescriptor& Describe(OpId op) { return kOpDescriptors[static_cast<int>(op)]; }
constexpr const char* OpName(OpId op) { return Describe(op).name; }

namespace op_list_internal {
constexpr bool SameName(const char* a, const char* b) {
  while (*a != 0 && *a == *b) ++a, ++b;
  return *a == *b;
}
constexpr bool NamesAreUnique() {
  for (int i = 0; i < kNumOps; ++i) {
    for (int j = i + 1; j < kNumOps; ++j) {
      if (SameName(kOpDescriptors[i].name, kOpDescriptors[j].name)) return false;
    }
  }
  return true;
}
constexpr bool IdsAreIndices() {
  for (int i = 0; i < kNumOps; ++i) {
    if (static_cast<int>(kOpDescriptors[i].id) != i) return false;
  }
  return true;
}
}  // namespace op_list_internal

static_assert(op_list_internal::NamesAreUnique(), "two ops share a name");
static_assert(op_list_internal::IdsAreIndices(), "the descriptor table is out of order");

// gelu_tanh_mlp is GPT-2's MLP (linear, gelu_tanh, linear) as one autograd
// node, so that a device can fuse the GELU into the GEMMs beside it
// (ops/gelu_mlp.h). It casts as its three ops do and records their plan rows,
// so no precision setting names it (job specs refuse it in op_policies).

// The elementwise families the backends' Unary/Binary kernels take.
constexpr bool IsUnaryOp(OpId op) {
  return op == OpId::kRelu || op == OpId::kGelu || op == OpId::kGeluTanh || op == OpId::kNeg ||
         op == OpId::kExp || op == OpId::kLog || op == OpId::kSquare;
}
constexpr bool IsPool2dOp(OpId op) {
  return op == OpId::kMaxPool2d || op == OpId::kAvgPool2d || op == OpId::kAdaptiveAvgPool2d;
}
// Ops that only re-describe their input's storage and run no kernel.
constexpr bool IsViewOp(OpId op) { return op == OpId::kReshape; }
constexpr bool IsBinaryOp(OpId op) {
  return op == OpId::kAdd || op == OpId::kSub || op == OpId::kMul;
}

}  // namespace ampd::engine::ops

// Op ids are vocabulary too (the backends' kernels take them): ampd::engine's.
namespace ampd::engine {
using ops::CastPolicy;
using ops::OpId;

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_OPS_OP_LIST_H_
