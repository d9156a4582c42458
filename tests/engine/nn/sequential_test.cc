// The sequential spec: shapes inferred and checked layer by layer (an
// impossible stack names the layer and both shapes), PyTorch's parameter
// and buffer names and layouts, and the precision rules for norms and
// running statistics.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/amp/precision.h"
#include "engine/nn/model.h"
#include "gtest/gtest.h"
#include "tests/engine/layer_specs.h"

namespace ampd::engine {
namespace {

using nn::LayerKind;
using nn::LayerSpec;
using nn::ModelShape;
using nn::SequentialSpec;

using testing::Conv;
using testing::Layer;
using testing::Linear;
using testing::MaxPool;

// Two conv blocks (conv, BN, ReLU, pool), a residual block with a strided
// projection, then flatten and linear.
SequentialSpec SmallCnn() {
  SequentialSpec s;
  s.input_shape = {1, 12, 12};
  s.num_classes = 10;
  s.layers = {Conv(8, 3, 1), Layer(LayerKind::kBatchNorm2d), Layer(LayerKind::kActivation),
              MaxPool(2)};
  LayerSpec res = Layer(LayerKind::kResidual);
  LayerSpec strided = Conv(16, 3, 1);
  strided.stride[0] = strided.stride[1] = 2;
  res.body = {strided, Layer(LayerKind::kBatchNorm2d), Layer(LayerKind::kActivation),
              Conv(16, 3, 1)};
  res.shortcut = LayerSpec::Shortcut::kConv1x1BatchNorm;
  res.activation_after = true;
  s.layers.push_back(res);
  s.layers.push_back(Layer(LayerKind::kFlatten));
  s.layers.push_back(Linear(10));
  return s;
}

TEST(SequentialTest, NamesAndShapesArePyTorchs) {
  ASSERT_TRUE(nn::ValidateModelSpec(SmallCnn()).ok()) << nn::ValidateModelSpec(SmallCnn());
  const ModelShape m = nn::DescribeModel(SmallCnn());
  std::vector<std::string> names;
  for (const auto& p : m.parameters) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                             "4.body.0.weight", "4.body.0.bias", "4.body.1.weight",
                                             "4.body.1.bias", "4.body.3.weight", "4.body.3.bias",
                                             "4.shortcut.0.weight", "4.shortcut.1.weight",
                                             "4.shortcut.1.bias", "6.weight", "6.bias"}));
  EXPECT_EQ(m.parameters[0].shape, (std::vector<int64_t>{8, 1, 3, 3}));  // OIHW
  EXPECT_EQ(m.parameters[0].fan_in, 9);
  EXPECT_EQ(m.parameters[10].shape, (std::vector<int64_t>{16, 8, 1, 1}));  // the projection
  // 12x12 -> pool 6x6 -> stride 2: 3x3, 16 channels: 144 features.
  EXPECT_EQ(m.parameters[13].shape, (std::vector<int64_t>{10, 144}));
  std::vector<std::string> buffers;
  for (const auto& b : m.buffers) buffers.push_back(b.name);
  EXPECT_EQ(buffers,
            (std::vector<std::string>{"1.running_mean", "1.running_var", "4.body.1.running_mean",
                                      "4.body.1.running_var", "4.shortcut.1.running_mean",
                                      "4.shortcut.1.running_var"}));
  for (OpId op : {OpId::kConv2d, OpId::kBatchNorm, OpId::kMaxPool2d, OpId::kRelu, OpId::kAdd,
                  OpId::kLinear, OpId::kReshape}) {
    EXPECT_NE(std::find(m.ops.begin(), m.ops.end(), op), m.ops.end()) << ops::OpName(op);
  }
  EXPECT_GT(m.flops_per_example, 0);
}

absl::Status Check(const SequentialSpec& s) { return nn::ValidateModelSpec(s); }

void ExpectInvalid(const SequentialSpec& s, const std::string& field,
                   const std::vector<std::string>& mentions) {
  const absl::Status st = Check(s);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(std::string(st.message()).rfind(field + ":", 0), 0u) << st;
  for (const std::string& m : mentions) {
    EXPECT_NE(std::string(st.message()).find(m), std::string::npos) << st << " lacks " << m;
  }
}

TEST(SequentialTest, AnImpossibleStackNamesTheLayerAndBothShapes) {
  SequentialSpec s = SmallCnn();
  s.input_shape = {1, 4, 4};  // 4 -> pool 2 -> stride 2: 1x1, fine; a 5x5 kernel is not
  s.layers[0] = Conv(8, 5);
  ExpectInvalid(s, "model.sequential.layers[0].conv2d", {"5x5", "[1, 4, 4]"});

  s = SmallCnn();
  s.layers[0].in = 3;  // the data has one channel
  ExpectInvalid(s, "model.sequential.layers[0].conv2d.in_channels", {"is 3", "[1, 12, 12]"});

  s = SmallCnn();
  s.layers.erase(s.layers.begin() + 5);  // no flatten before the linear
  ExpectInvalid(s, "model.sequential.layers[5].linear", {"[16, 3, 3]", "flatten"});

  s = SmallCnn();
  s.layers.back().out = 7;
  ExpectInvalid(s, "model.sequential.layers", {"[7]", "[10]"});

  s = SmallCnn();
  s.layers[4].shortcut = LayerSpec::Shortcut::kIdentity;  // the block changes the shape
  ExpectInvalid(s, "model.sequential.layers[4].residual", {"[16, 3, 3]", "[8, 6, 6]"});

  s = SmallCnn();
  s.layers[4].body[0].groups = 3;  // 8 channels in 3 groups
  ExpectInvalid(s, "model.sequential.layers[4].residual.layers[0].conv2d.groups", {"8"});

  s = SmallCnn();
  s.layers[3].padding[0] = 2;  // more than half the 2x2 window
  ExpectInvalid(s, "model.sequential.layers[3].max_pool2d.padding", {"half"});

  s = SmallCnn();
  s.layers.insert(s.layers.begin() + 6, Layer(LayerKind::kBatchNorm2d));  // after flatten
  ExpectInvalid(s, "model.sequential.layers[6].batch_norm2d", {"[144]"});
}

TEST(SequentialTest, NormsFollowKeepNormsFp32AndRunningStatisticsStayF32) {
  for (const char* mode : {"16-true", "bf16-mixed", "O2"}) {
    absl::StatusOr<amp::PrecisionConfig> p = amp::ResolvePrecision(mode);
    ASSERT_TRUE(p.ok()) << mode;
    absl::StatusOr<std::unique_ptr<nn::Model>> m = nn::BuildModel(SmallCnn(), *p, 1);
    ASSERT_TRUE(m.ok()) << m.status();
    for (const nn::Parameter& q : (*m)->parameters()) {
      const DType want = q.is_norm && p->keep_norms_fp32 ? DType::kF32 : p->param_dtype;
      EXPECT_EQ(q.value.dtype(), want) << mode << " " << q.name;
    }
    ASSERT_EQ((*m)->buffers().size(), 6u);
    for (const nn::Parameter& b : (*m)->buffers()) {
      EXPECT_EQ(b.value.dtype(), DType::kF32) << mode << " " << b.name;
    }
  }
}

}  // namespace
}  // namespace ampd::engine
