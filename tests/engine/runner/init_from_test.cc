// JobSpec.init_from (runner/job_spec.h): the file's tensors against the
// model's parameters, each mismatch its own INVALID_ARGUMENT on "init_from"
// naming the tensor (and both shapes); a fitting file's values become the
// trainer's initial weights, low-precision ones up-cast exactly.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/nn/model.h"
#include "engine/runner/job_spec.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"

namespace ampd::engine {
namespace {

using runner::CheckInitFrom;
using runner::JobSpecContext;
using runner::LoadInitFrom;

class InitFromTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = std::string(tmp ? tmp : "/tmp") + "/init_from";
    std::filesystem::create_directories(root_);
    context_.data_root = root_;
    nn::MlpSpec m;
    m.input_dim = 4;
    m.num_classes = 3;
    m.hidden = {5};
    model_ = m;  // fc1.weight [5, 4], fc1.bias [5], head.weight [3, 5], head.bias [3]
  }
  // The model's own parameters, as a file: the right names and shapes.
  std::vector<std::pair<std::string, Tensor>> Fitting(DType dtype = DType::kF32) {
    std::vector<std::pair<std::string, Tensor>> t;
    double v = 0.125;
    for (const nn::ParameterShape& p : nn::DescribeModel(model_).parameters) {
      std::vector<double> values(p.numel());
      for (double& x : values) x = (v += 0.25);
      t.emplace_back(p.name, Tensor::FromDoubles(values, p.shape, dtype));
    }
    return t;
  }
  std::string Write(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& t) {
    EXPECT_TRUE(io::WriteSafetensors(root_ + "/" + name, t, {}).ok());
    return name;
  }
  absl::Status Check(const std::string& file) {
    ampd::v1::JobSpec spec;
    spec.set_init_from(file);
    return CheckInitFrom(spec, context_, model_);
  }

  std::string root_;
  JobSpecContext context_;
  nn::ModelSpec model_;
};

TEST_F(InitFromTest, AFittingFileIsAccepted) {
  EXPECT_TRUE(Check(Write("ok.safetensors", Fitting())).ok());
  ampd::v1::JobSpec spec;
  EXPECT_TRUE(CheckInitFrom(spec, context_, model_).ok());  // no init_from: nothing to check
}

TEST_F(InitFromTest, EveryMismatchNamesTheFieldAndTheTensor) {
  auto t = Fitting();
  t.erase(t.begin() + 1);  // fc1.bias
  absl::Status s = Check(Write("missing.safetensors", t));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "init_from: missing.safetensors has no tensor fc1.bias (shape [5] in the model)");

  t = Fitting();
  t.emplace_back("fc2.weight", Tensor::Zeros({2, 2}, DType::kF32));
  EXPECT_EQ(Check(Write("extra.safetensors", t)).message(),
            "init_from: extra.safetensors has a tensor the model does not: fc2.weight (shape "
            "[2, 2])");

  t = Fitting();
  t[2].second = Tensor::Zeros({5, 3}, DType::kF32);  // head.weight transposed
  EXPECT_EQ(Check(Write("shape.safetensors", t)).message(),
            "init_from: shape.safetensors: tensor head.weight has shape [5, 3] in the file and "
            "[3, 5] in the model");

  t = Fitting();
  t[3].second = Tensor::Zeros({3}, DType::kU8);
  EXPECT_EQ(Check(Write("dtype.safetensors", t)).message(),
            "init_from: dtype.safetensors: tensor head.bias is u8, not a floating-point dtype");

  s = Check("none.safetensors");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("init_from: ", 0), 0u) << s;
  EXPECT_NE(s.message().find("none.safetensors"), std::string::npos) << s;

  std::filesystem::create_directories(root_);
  { std::ofstream(root_ + "/junk.safetensors") << "not a safetensors file"; }
  s = Check("junk.safetensors");
  EXPECT_EQ(s.message().rfind("init_from: ", 0), 0u) << s;
}

TEST_F(InitFromTest, TheWeightsBecomeTheModelsUpCastExactly) {
  for (DType file_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(file_dtype)));
    const auto file = Fitting(file_dtype);
    ampd::v1::JobSpec spec;
    spec.set_init_from(Write("w.safetensors", file));
    train::TrainerConfig c;
    c.model = model_;
    c.precision = *amp::ResolvePrecision("32-true");
    ASSERT_TRUE(LoadInitFrom(spec, context_, &c).ok());
    ASSERT_EQ(c.initial_weights.size(), 4u);
    data::Dataset d;
    d.num_examples = 8;
    d.feature_dim = 4;
    d.num_classes = 3;
    d.features.assign(32, 0.5f);
    d.labels.assign(8, 1);
    c.training.batch_size = 4;
    c.training.steps = 1;
    auto t = train::Trainer::Create(c, &d, nullptr);
    ASSERT_TRUE(t.ok()) << t.status();
    for (const nn::Parameter& p : (*t)->model().parameters()) {
      EXPECT_EQ(p.value.dtype(), DType::kF32);
      for (const auto& [name, tensor] : file) {
        // The values written (multiples of 1/8, exact in every dtype).
        if (name == p.name) {
          EXPECT_EQ(p.value.ToDoubles(), tensor.ToDoubles()) << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ampd::engine
