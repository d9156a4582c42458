// The op descriptors: one name per op, the autocast table built from them,
// each op's gradient in its descriptor, and the backends saying which ops
// they have.

#include "engine/ops/op_list.h"

#include <set>
#include <string>

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using autograd::Backward;
using backend::Backend;
using backend::BackendFor;
using backend::BinaryKernel;
using backend::Kernel;
using backend::UnaryKernel;
using ops::DefaultCastPolicy;
using ops::Define;
using ops::Describe;
using ops::FindOp;
using ops::Gelu;
using ops::IsBinaryOp;
using ops::IsUnaryOp;
using ops::kNumOps;
using ops::kOpDefs;
using ops::kOpDescriptors;
using ops::OpDef;
using ops::OpDescriptor;
using ops::OpName;
using ops::SavedForBackward;

namespace {

TEST(OpListTest, EveryOpHasOneNameThatFindsIt) {
  std::set<std::string> names;
  for (const OpDescriptor& d : kOpDescriptors) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    ASSERT_TRUE(FindOp(d.name).has_value()) << d.name;
    EXPECT_EQ(*FindOp(d.name), d.id);
    EXPECT_STREQ(OpName(d.id), d.name);
  }
  EXPECT_EQ(static_cast<int>(names.size()), kNumOps);
  // Square is "pow" (torch.pow's autocast entry), and nothing else.
  EXPECT_STREQ(OpName(OpId::kSquare), "pow");
  EXPECT_FALSE(FindOp("pow2").has_value());
  EXPECT_FALSE(FindOp("square").has_value());
  EXPECT_FALSE(FindOp("conv").has_value());  // it is conv2d
  EXPECT_TRUE(FindOp("conv2d").has_value());
  EXPECT_FALSE(FindOp("").has_value());
}

TEST(OpListTest, TheAutocastTableIsTheDescriptorsPolicies) {
  // torch.autocast's lists (CUDA/CPU op lists in the AMP docs).
  EXPECT_EQ(DefaultCastPolicy(OpId::kMatmul), CastPolicy::kLowerPrecision);
  EXPECT_EQ(DefaultCastPolicy(OpId::kLinear), CastPolicy::kLowerPrecision);
  for (OpId op : {OpId::kSoftmax, OpId::kLogSoftmax, OpId::kLayerNorm, OpId::kExp, OpId::kLog,
                  OpId::kSquare, OpId::kCrossEntropy, OpId::kSum, OpId::kMean}) {
    EXPECT_EQ(DefaultCastPolicy(op), CastPolicy::kFp32) << OpName(op);
  }
  for (OpId op : {OpId::kAdd, OpId::kSub, OpId::kMul}) {
    EXPECT_EQ(DefaultCastPolicy(op), CastPolicy::kPromote) << OpName(op);
  }
  for (OpId op : {OpId::kRelu, OpId::kGelu, OpId::kDropout, OpId::kEmbedding, OpId::kCast}) {
    EXPECT_EQ(DefaultCastPolicy(op), CastPolicy::kPassThrough) << OpName(op);
  }
  for (const OpDescriptor& d : kOpDescriptors) EXPECT_EQ(DefaultCastPolicy(d.id), d.policy);
}

TEST(OpListTest, TheFamiliesAreDisjointAndNamed) {
  int unary = 0, binary = 0;
  for (const OpDescriptor& d : kOpDescriptors) {
    EXPECT_FALSE(IsUnaryOp(d.id) && IsBinaryOp(d.id)) << d.name;
    unary += IsUnaryOp(d.id);
    binary += IsBinaryOp(d.id);
  }
  EXPECT_EQ(unary, 7);   // relu gelu gelu_tanh neg exp log pow
  EXPECT_EQ(binary, 3);  // add sub mul
}

TEST(OpListTest, EveryOpsFullDescriptorHasItsGradient) {
  ASSERT_EQ(static_cast<int>(std::size(kOpDefs)), kNumOps);
  for (const OpDef& def : kOpDefs) {
    EXPECT_EQ(def.descriptor.id, Describe(def.descriptor.id).id);
    EXPECT_STREQ(def.descriptor.name, OpName(def.descriptor.id));
    EXPECT_EQ(def.descriptor.policy, Describe(def.descriptor.id).policy) << def.descriptor.name;
    EXPECT_NE(def.gradient, nullptr) << def.descriptor.name;
  }
  // The family shares one gradient, told apart by the op it saved.
  EXPECT_EQ(Define(OpId::kGelu).gradient, Define(OpId::kExp).gradient);
  EXPECT_NE(Define(OpId::kGelu).gradient, Define(OpId::kLinear).gradient);
}

// What autograd runs is the descriptor's gradient on what the forward saved.
TEST(OpListTest, BackwardRunsTheGradientOfTheDescriptor) {
  Tensor x = Tensor::FromVector({-1.5f, 0.25f, 2.0f}, {3}, DType::kF32);
  x.set_requires_grad(true);
  Tensor y = Gelu(x);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->op, OpId::kGelu);
  const Tensor g = Tensor::FromVector({1.0f, -2.0f, 0.5f}, {3}, DType::kF32);
  Backward(y, g);
  SavedForBackward saved;
  saved.op = OpId::kGelu;
  saved.inputs = {x.Detach()};
  const std::vector<Tensor> direct = Define(OpId::kGelu).gradient(saved, g);
  ASSERT_EQ(direct.size(), 1u);
  EXPECT_EQ(x.grad().ToFloats(), direct[0].ToFloats());
  // and that is GELU's derivative, not another function's
  saved.op = OpId::kExp;
  EXPECT_NE(Define(OpId::kExp).gradient(saved, g)[0].ToFloats(), direct[0].ToFloats());
}

TEST(OpListTest, TheCpuBackendIsRegisteredAndHasEveryOp) {
  absl::StatusOr<Backend*> cpu = BackendFor(Device::kCpu);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(*cpu, &cpu::CpuBackend());
  for (const OpDescriptor& d : kOpDescriptors) EXPECT_TRUE((*cpu)->HasKernel(d.id)) << d.name;
}

TEST(OpListTest, ANonUnaryOpGivenToTheUnaryKernelIsAnErrorNotAnotherFunction) {
  const Tensor x = Tensor::FromVector({1, 2, 3}, {3}, DType::kF32);
  EXPECT_DEATH(Kernel<UnaryKernel>(Device::kCpu)(OpId::kMatmul, x), "op matmul is not a unary op");
  EXPECT_DEATH(Kernel<BinaryKernel>(Device::kCpu)(OpId::kRelu, x, x, DType::kF32),
               "op relu is not a binary op");
}

}  // namespace
}  // namespace ampd::engine
