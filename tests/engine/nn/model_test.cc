// The model's description (DescribeModel) is the one source of its shape:
// the built model has exactly those parameters, and counts and estimates
// agree with it.

#include "engine/nn/model.h"

#include "gtest/gtest.h"

namespace ampd::engine {

using amp::ResolvePrecision;
using nn::Activation;
using nn::BuildModel;
using nn::CheckDataDims;
using nn::DataDimsKnown;
using nn::DescribeModel;
using nn::FillDataDims;
using nn::MlpSpec;
using nn::Model;
using nn::ModelOps;
using nn::ModelShape;
using nn::ModelSpec;
using nn::Parameter;
using nn::ParameterCount;

namespace {

MlpSpec Spec(bool layer_norm) {
  MlpSpec m;
  m.input_dim = 12;
  m.hidden = {8, 6};
  m.num_classes = 4;
  m.layer_norm = layer_norm;
  m.activation = Activation::kGelu;
  m.dropout = 0.1;
  return m;
}

TEST(ModelTest, TheBuiltModelHasExactlyTheDescribedParameters) {
  for (bool norm : {false, true}) {
    const ModelShape shape = DescribeModel(Spec(norm));
    absl::StatusOr<std::unique_ptr<Model>> model =
        BuildModel(Spec(norm), *ResolvePrecision("bf16-mixed"), 1);
    ASSERT_TRUE(model.ok()) << model.status();
    const std::vector<Parameter>& params = (*model)->parameters();
    ASSERT_EQ(params.size(), shape.parameters.size());
    int64_t elements = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].name, shape.parameters[i].name);
      EXPECT_EQ(params[i].layer, shape.parameters[i].layer);
      EXPECT_EQ(params[i].value.shape(), shape.parameters[i].shape) << params[i].name;
      EXPECT_EQ(params[i].is_norm, shape.parameters[i].is_norm);
      elements += params[i].value.numel();
    }
    EXPECT_EQ(elements, shape.parameter_count());
    EXPECT_EQ(ParameterCount(Spec(norm)), elements);
    EXPECT_EQ((*model)->activation_elements_per_example(), shape.activation_elements_per_example);
  }
  // 12*8+8 + 8*6+6 + 6*4+4, and the two norms' 2*(8+6).
  EXPECT_EQ(ParameterCount(Spec(false)), 186);
  EXPECT_EQ(ParameterCount(Spec(true)), 186 + 28);
}

TEST(ModelTest, TheOpsFollowTheSpec) {
  EXPECT_EQ(ModelOps(Spec(true)), (std::vector<OpId>{OpId::kLinear, OpId::kCast, OpId::kGelu,
                                                     OpId::kLayerNorm, OpId::kDropout}));
  MlpSpec plain = Spec(false);
  plain.activation = Activation::kRelu;
  plain.dropout = 0;
  EXPECT_EQ(ModelOps(plain), (std::vector<OpId>{OpId::kLinear, OpId::kCast, OpId::kRelu}));
}

TEST(ModelTest, DataDimsAreFilledFromTheDataAndChecked) {
  MlpSpec open = Spec(false);
  open.input_dim = 0;
  open.num_classes = 0;
  ModelSpec spec = open;
  EXPECT_FALSE(DataDimsKnown(spec));
  FillDataDims(&spec, 20, 1);  // at least two classes
  EXPECT_TRUE(DataDimsKnown(spec));
  EXPECT_EQ(std::get<MlpSpec>(spec).input_dim, 20);
  EXPECT_EQ(std::get<MlpSpec>(spec).num_classes, 2);
  EXPECT_TRUE(CheckDataDims(spec, 20, 2).ok());
  EXPECT_EQ(CheckDataDims(spec, 21, 2).message(),
            "model.mlp.input_dim: is 20 but the data has 21 features per example");
  EXPECT_EQ(CheckDataDims(spec, 20, 3).message(),
            "model.mlp.num_classes: is 2 but the data has 3 classes");
}

}  // namespace
}  // namespace ampd::engine
