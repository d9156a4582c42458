#include "engine/runner/job_spec.h"

#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "engine/train/explain.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using amp::PrecisionConfig;
using amp::ResolvePrecision;
using nn::MlpSpec;
using optim::OptimizerSpec;
using runner::FieldViolation;
using runner::JobSpecContext;
using runner::LoadJobData;
using runner::ParseJobSpecJson;
using runner::ReadJobSpecFile;
using runner::ResolveJobSpec;
using runner::ValidateJobSpec;
using train::ExplainPrecision;
using train::TrainerConfig;

namespace {

ampd::v1::JobSpec Parse(const std::string& json) {
  auto spec = ParseJobSpecJson(json, "test.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ampd::v1::JobSpec();
}

std::vector<std::string> Fields(const std::vector<FieldViolation>& v) {
  std::vector<std::string> f;
  for (const auto& x : v) f.push_back(x.field);
  return f;
}

TEST(JobSpecTest, EmptySpecGetsSaneDefaults) {
  auto job = ResolveJobSpec(Parse("{}"), {});
  ASSERT_TRUE(job.ok()) << job.status();
  const TrainerConfig& c = job->config;
  EXPECT_EQ(c.precision.name, "32-true");
  EXPECT_EQ(c.training.batch_size, 128);
  EXPECT_EQ(c.training.epochs, 1);
  EXPECT_EQ(c.optimizer.kind, OptimizerSpec::Kind::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  const MlpSpec& mlp = std::get<MlpSpec>(c.model);
  EXPECT_EQ(mlp.input_dim, 784);  // fashion-mnist by default
  EXPECT_EQ(mlp.num_classes, 10);
  EXPECT_EQ(mlp.hidden, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(job->device, Device::kCpu);
}

TEST(JobSpecTest, EveryBadFieldIsReportedAtOnce) {
  auto spec = Parse(R"({
    "model": {"mlp": {"hidden": [64, -3], "dropout": 1.5}},
    "training": {"batchSize": "0", "steps": "-5", "gradAccumulation": "0", "clipNorm": -1},
    "optimizer": {"lr": -0.1, "sgd": {"momentum": 2, "nesterov": true}},
    "precision": {"profile": "fp8"},
    "data": {"builtin": "imagenet"}
  })");
  auto v = ValidateJobSpec(spec, {});
  auto fields = Fields(v);
  for (const char* f :
       {"model.mlp.hidden[1]", "model.mlp.dropout", "training.batch_size", "training.steps",
        "training.grad_accumulation", "training.clip_norm", "optimizer.lr",
        "optimizer.sgd.momentum", "precision.profile", "data.builtin"}) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), f), fields.end()) << "missing " << f;
  }
  auto job = ResolveJobSpec(spec, {});
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(job.status().message()).find("training.batch_size: must be > 0, got 0"),
            std::string::npos)
      << job.status();
  // An unknown precision lists what would have been accepted, aliases too
  // ("fp8" is a near miss of "fp8-hybrid" and of Lightning's name for it).
  EXPECT_NE(std::string(job.status().message())
                .find("precision.profile: \"fp8\" is neither a built-in mode (32-true, "),
            std::string::npos)
      << job.status();
  EXPECT_NE(std::string(job.status().message())
                .find("fp8-current, transformer-engine-float16 (or the aliases 32, fp32, 16, "
                      "bf16, transformer-engine)) nor a defined profile"),
            std::string::npos)
      << job.status();
}

TEST(JobSpecTest, DoublePrecisionIsRefusedWithTheAlternative) {
  auto job = ResolveJobSpec(Parse(R"({"precision": {"profile": "64-true"}})"), {});
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(job.status().message())
                .find("precision.profile: \"64-true\" (double precision) is not supported: ampd "
                      "trains in f32 at most; use 32-true"),
            std::string::npos)
      << job.status();
}

// Widths whose products would overflow a parameter count (job_spec_fuzzer
// found 25699999999999999 x 784) are refused, naming the field.
TEST(JobSpecTest, MlpWidthsAreBoundedSoThatCountsCannotOverflow) {
  for (const char* model :
       {R"({"mlp": {"hidden": [25699999999999999]}})", R"({"mlp": {"hidden": [16777217]}})"}) {
    auto job = ResolveJobSpec(Parse(absl::StrCat(R"({"model": )", model, "}")), {});
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << model;
    EXPECT_NE(
        std::string(job.status().message()).find("model.mlp.hidden[0]: must be in [1, 16777216]"),
        std::string::npos)
        << job.status();
  }
}

TEST(JobSpecTest, UnknownJsonFieldIsNamedWithTheFile) {
  auto spec = ParseJobSpecJson(R"({"trainig": {}})", "my_spec.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(std::string(spec.status().message()).find("my_spec.json"), std::string::npos);
  EXPECT_NE(std::string(spec.status().message()).find("trainig"), std::string::npos);
  EXPECT_EQ(ReadJobSpecFile("/nonexistent/spec.json").status().code(), absl::StatusCode::kNotFound);
}

// A misspelt enum value gets the enum's value names (protobuf's parser names
// only the type).
TEST(JobSpecTest, AnUnknownEnumValueListsTheValidOnes) {
  auto spec =
      ParseJobSpecJson(R"({"model": {"gpt": {"activation": "ACTIVATION_GELU_ERF"}}})", "gpt.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(std::string(spec.status().message()).find("gpt.json"), std::string::npos)
      << spec.status();
  EXPECT_NE(std::string(spec.status().message())
                .find("ACTIVATION_GELU_ERF\" for type type.googleapis.com/ampd.v1.Activation; "
                      "expected one of ACTIVATION_UNSPECIFIED, ACTIVATION_RELU, ACTIVATION_GELU, "
                      "ACTIVATION_GELU_TANH"),
            std::string::npos)
      << spec.status();
  auto schedule = ParseJobSpecJson(R"({"schedule": {"kind": "cosine"}})", "s.json");
  ASSERT_FALSE(schedule.ok());
  EXPECT_NE(std::string(schedule.status().message()).find("; expected one of KIND_"),
            std::string::npos)
      << schedule.status();
}

TEST(JobSpecTest, PathsMustStayUnderTheDataRoot) {
  auto v = ValidateJobSpec(Parse(R"({"data": {"file": {"format": "FORMAT_CSV",
      "trainCsv": "../../etc/passwd", "testCsv": "/etc/passwd"}}})"),
                           {});
  auto fields = Fields(v);
  EXPECT_EQ(fields, (std::vector<std::string>{"data.file.train_csv", "data.file.test_csv"}));
}

TEST(JobSpecTest, CustomPrecisionOverridesItsBase) {
  auto job = ResolveJobSpec(Parse(R"({"precision": {"custom": {
      "base": "16-mixed", "fp32Layers": ["head"], "opPolicies": {"gelu": "CAST_POLICY_FP32"},
      "lossScaling": {"initScale": 1024, "minScale": 1, "growthInterval": "100"}}}})"),
                            {});
  ASSERT_TRUE(job.ok()) << job.status();
  const PrecisionConfig& p = job->config.precision;
  EXPECT_TRUE(p.autocast);
  EXPECT_EQ(p.autocast_dtype, DType::kF16);
  EXPECT_TRUE(p.loss_scaling.enabled);
  EXPECT_EQ(p.loss_scaling.init_scale, 1024);
  EXPECT_EQ(p.loss_scaling.growth_interval, 100);
  EXPECT_EQ(*p.loss_scaling.min_scale, 1);
  EXPECT_EQ(p.overrides.fp32_layers.count("head"), 1u);
  EXPECT_EQ(p.overrides.op_policies.at(OpId::kGelu), CastPolicy::kFp32);
}

TEST(JobSpecTest, AnOpPolicyForAnUnknownOpIsRefusedNotIgnored) {
  // A typo must not silently become a policy for nothing.
  auto v = ValidateJobSpec(Parse(R"({"precision": {"custom": {
      "base": "bf16-mixed", "opPolicies": {"gleu": "CAST_POLICY_FP32", "pow": "CAST_POLICY_PROMOTE"}}}})"),
                           {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "precision.custom.op_policies[gleu]");
  EXPECT_NE(v[0].description.find("unknown op \"gleu\""), std::string::npos) << v[0].description;
  EXPECT_NE(v[0].description.find("gelu"), std::string::npos) << v[0].description;
}

// gelu_tanh_mlp casts as its three ops do: a policy for it would change
// nothing, so it is refused with what to set instead.
TEST(JobSpecTest, AnOpPolicyForTheFusedGptMlpIsRefused) {
  auto v = ValidateJobSpec(Parse(R"({"precision": {"custom": {
      "base": "bf16-mixed", "opPolicies": {"gelu_tanh_mlp": "CAST_POLICY_FP32"}}}})"),
                           {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "precision.custom.op_policies[gelu_tanh_mlp]");
  EXPECT_NE(v[0].description.find("\"linear\" or \"gelu_tanh\""), std::string::npos)
      << v[0].description;
}

TEST(JobSpecTest, InvalidCustomPrecisionNamesTheNestedField) {
  auto v = ValidateJobSpec(Parse(R"({"precision": {"custom": {
      "base": "16-mixed", "lossScaling": {"growthFactor": 0.5}}}})"),
                           {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, "precision.custom.loss_scaling.growth_factor");
  auto v2 = ValidateJobSpec(Parse(R"({"precision": {"custom": {"base": "32-true",
      "masterWeights": true}}})"),
                            {});
  ASSERT_EQ(v2.size(), 1u);
  EXPECT_EQ(v2[0].field, "precision.custom.master_weights");
}

TEST(JobSpecTest, CsvImagesDeclareTheirShape) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream csv(dir + "/img.csv");
    for (int i = 0; i < 40; ++i) {  // label, then a 2x3x3 image
      csv << i % 2;
      for (int k = 0; k < 18; ++k) csv << "," << (k + i) % 7;
      csv << "\n";
    }
  }
  JobSpecContext context;
  context.data_root = dir;
  auto spec = Parse(R"({"model": {"sequential": {"layers": [
      {"conv2d": {"outChannels": "4", "kernelSize": ["2"]}}, {"flatten": {}},
      {"linear": {"outFeatures": "2"}}]}},
    "data": {"file": {"format": "FORMAT_CSV", "trainCsv": "img.csv",
                      "exampleShape": ["2", "3", "3"]},
             "augment": {"horizontalFlip": true}},
    "training": {"batchSize": 8}})");
  auto job = ResolveJobSpec(spec, context);
  ASSERT_TRUE(job.ok()) << job.status();
  auto data = LoadJobData(spec.data(), context, &job->config);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.example_shape, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(std::get<nn::SequentialSpec>(job->config.model).input_shape,
            (std::vector<int64_t>{2, 3, 3}));
  // A shape that does not hold the row's features, named.
  auto wrong = Parse(R"({"data": {"file": {"format": "FORMAT_CSV", "trainCsv": "img.csv",
                                          "exampleShape": ["2", "3", "4"]}}})");
  auto bad = LoadJobData(wrong.data(), context, nullptr);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("data.file.example_shape"), std::string::npos)
      << bad.status();
  // Without a shape CSV rows are vectors, which augmentation refuses.
  auto flat = ValidateJobSpec(Parse(R"({"data": {"file": {"format": "FORMAT_CSV",
      "trainCsv": "img.csv"}, "augment": {"horizontalFlip": true}}})"),
                              context);
  EXPECT_EQ(Fields(flat), std::vector<std::string>{"data.augment"});
}

TEST(JobSpecTest, UserProfilesResolveByName) {
  JobSpecContext context;
  context.profiles = [](const std::string& name) -> std::optional<ampd::v1::PrecisionConfig> {
    if (name != "my-bf16") return std::nullopt;
    ampd::v1::PrecisionConfig p;
    p.set_base("bf16-mixed");
    p.add_fp32_layers("head");
    return p;
  };
  auto job = ResolveJobSpec(Parse(R"({"precision": {"profile": "my-bf16"}})"), context);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->config.precision.name, "my-bf16");
  EXPECT_EQ(job->config.precision.autocast_dtype, DType::kBF16);
  EXPECT_EQ(job->config.precision.overrides.fp32_layers.count("head"), 1u);
}

TEST(JobSpecTest, SyntheticDataFillsModelShapeAndHasATestSplit) {
  auto spec = Parse(R"({"data": {"synthetic": {"numExamples": 256, "featureDim": 12,
      "numClasses": 3, "numTestExamples": 64}}})");
  auto job = ResolveJobSpec(spec, {});
  ASSERT_TRUE(job.ok()) << job.status();
  auto data = LoadJobData(spec.data(), {}, &job->config);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.num_examples, 256);
  ASSERT_TRUE(data->test.has_value());
  EXPECT_EQ(data->test->num_examples, 64);
  EXPECT_EQ(std::get<MlpSpec>(job->config.model).input_dim, 12);
  EXPECT_EQ(std::get<MlpSpec>(job->config.model).num_classes, 3);
}

TEST(JobSpecTest, ExamplesInTheRepositoryAreValid) {
  for (const char* name :
       {"fashion_mlp_fp32.json", "fashion_mlp_bf16.json", "fashion_mlp_fp16.json",
        "fashion_mlp_custom_precision.json", "fashion_mlp_bf16_cuda.json"}) {
    auto spec = ReadJobSpecFile(std::string("examples/") + name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto job = ResolveJobSpec(*spec, {});
    EXPECT_TRUE(job.ok()) << name << ": " << job.status();
  }
  // The GPT examples, FP8 included.
  for (const char* name : {"fortunes_gpt_bf16.json", "fortunes_gpt_fp32.json",
                           "fortunes_gpt_fp8.json", "fortunes_gpt_bf16_adamw8bit.json"}) {
    auto spec = ReadJobSpecFile(std::string("examples/") + name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto job = ResolveJobSpec(*spec, {});
    EXPECT_TRUE(job.ok()) << name << ": " << job.status();
  }
  EXPECT_TRUE(
      ResolveJobSpec(*ReadJobSpecFile("examples/fortunes_gpt_fp8.json"), {})->config.precision.fp8);
  // The GPU example asks for CUDA; everything else about it is the CPU's.
  auto cuda = ResolveJobSpec(*ReadJobSpecFile("examples/fashion_mlp_bf16_cuda.json"), {});
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->device, Device::kCuda);
  EXPECT_EQ(cuda->config.device, Device::kCuda);
}

TEST(JobSpecTest, TheCnnExampleIsASequentialModelOverImages) {
  auto spec = ReadJobSpecFile("examples/fashion_cnn_bf16.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto job = ResolveJobSpec(*spec, {});
  ASSERT_TRUE(job.ok()) << job.status();
  const nn::SequentialSpec& q = std::get<nn::SequentialSpec>(job->config.model);
  EXPECT_EQ(q.input_shape, (std::vector<int64_t>{1, 28, 28}));  // fashion-mnist's images
  EXPECT_EQ(q.num_classes, 10);
  // conv 32 (288 + 32), BN (64), conv 64 (18432 + 64), BN (128), 3136 -> 128, 128 -> 10.
  EXPECT_EQ(nn::ParameterCount(job->config.model),
            320 + 64 + 18496 + 128 + (3136 * 128 + 128) + (128 * 10 + 10));
}

TEST(JobSpecTest, TheResNetExampleHasProjectionsAndAugmentation) {
  auto spec = ReadJobSpecFile("examples/fashion_resnet_bf16.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto job = ResolveJobSpec(*spec, {});
  ASSERT_TRUE(job.ok()) << job.status();
  const nn::ModelShape m = nn::DescribeModel(job->config.model);
  EXPECT_EQ(m.buffers.size(), 2u * 9);  // nine batch norms, two of them in projections
  EXPECT_EQ(m.parameters[m.parameters.size() - 2].shape, (std::vector<int64_t>{10, 128}));
  EXPECT_EQ(job->config.transforms.crop_padding, 2);
  EXPECT_TRUE(job->config.transforms.horizontal_flip);
}

TEST(JobSpecTest, ExplainShowsEveryLayerOfTheCnnWithItsDtypes) {
  auto job = ResolveJobSpec(*ReadJobSpecFile("examples/fashion_cnn_bf16.json"), {});
  ASSERT_TRUE(job.ok()) << job.status();
  auto plan =
      ExplainPrecision(job->config.model, job->config.precision, job->config.optimizer, 128);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, int> count;
  for (const ops::PlanEntry& e : plan->ops) {
    ++count[e.op];
    if (e.op == "conv2d" || e.op == "linear") {
      EXPECT_EQ(e.compute_dtype, DType::kBF16) << e.op << " " << e.layer;  // autocast's list
    }
    if (e.op == "batch_norm") {
      // f32 arithmetic on the bf16 activation, written back in bf16 (as
      // PyTorch's batch norm under autocast); ReLU and pooling stay bf16.
      EXPECT_EQ(e.compute_dtype, DType::kF32) << e.layer;
      EXPECT_EQ(e.output_dtype, DType::kBF16) << e.layer;
      EXPECT_EQ(e.input_dtypes, (std::vector<DType>{DType::kBF16, DType::kF32, DType::kF32}));
    }
    if (e.op == "relu" || e.op == "max_pool2d") {
      EXPECT_EQ(e.output_dtype, DType::kBF16) << e.op;
    }
    if (e.op == "conv2d" && e.layer == "0") {
      EXPECT_EQ(e.output_bytes, int64_t{128} * 32 * 28 * 28 * 2);  // [128, 32, 28, 28] bf16
    }
  }
  EXPECT_EQ(count["conv2d"], 2);
  EXPECT_EQ(count["batch_norm"], 2);
  EXPECT_EQ(count["max_pool2d"], 2);
  EXPECT_EQ(count["linear"], 2);
  EXPECT_GT(plan->memory.activation_bytes, 0);
}

TEST(JobSpecTest, SequentialFieldsAreCheckedAndNamed) {
  // What the proto alone gets wrong, every one at once.
  auto v = ValidateJobSpec(Parse(R"({"model": {"sequential": {
      "inputShape": ["1", "0", "28"], "numClasses": "1",
      "layers": [{"conv2d": {"outChannels": "8"}},
                 {"maxPool2d": {"kernelSize": ["2", "2", "2"], "countIncludePad": false}},
                 {},
                 {"activation": "ACTIVATION_GELU_TANH"},
                 {"residual": {"layers": [{"avgPool2d": {"kernelSize": ["2"], "dilation": ["2"]}}]}}]
    }}})"),
                           {});
  const std::vector<std::string> f = Fields(v);
  for (const char* want : {"model.sequential.input_shape", "model.sequential.num_classes",
                           "model.sequential.layers[0].conv2d.kernel_size",
                           "model.sequential.layers[1].max_pool2d.kernel_size",
                           "model.sequential.layers[1].max_pool2d.count_include_pad",
                           "model.sequential.layers[2]", "model.sequential.layers[3].activation",
                           "model.sequential.layers[4].residual.layers[0].avg_pool2d.dilation"}) {
    EXPECT_NE(std::find(f.begin(), f.end(), want), f.end()) << want;
  }
  // Shapes, once the data's are known: a kernel larger than fashion-mnist's
  // pooled images names the layer and both shapes.
  auto job = ResolveJobSpec(Parse(R"({"model": {"sequential": {"layers": [
      {"maxPool2d": {"kernelSize": ["4"]}},
      {"conv2d": {"outChannels": "8", "kernelSize": ["9"]}},
      {"flatten": {}}, {"linear": {"outFeatures": "10"}}]}}})"),
                            {});
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(job.status().message());
  EXPECT_NE(msg.find("model.sequential.layers[1].conv2d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9x9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 7, 7]"), std::string::npos) << msg;
}

TEST(JobSpecTest, ImageTransformsAreCheckedAndResolved) {
  auto job = ResolveJobSpec(Parse(R"({"data": {"builtin": "fashion-mnist",
      "normalize": {"mean": [0.286], "std": [0.353]},
      "augment": {"randomCropPadding": "2", "horizontalFlip": true, "randomErasing": 0.5}}})"),
                            {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->config.transforms.mean, std::vector<float>{0.286f});
  EXPECT_EQ(job->config.transforms.crop_padding, 2);
  EXPECT_TRUE(job->config.transforms.horizontal_flip);
  EXPECT_DOUBLE_EQ(job->config.transforms.erasing, 0.5);
  auto v = ValidateJobSpec(Parse(R"({"data": {"builtin": "fashion-mnist",
      "normalize": {"mean": [0.5, 0.5], "std": [0.5, 0]},
      "augment": {"randomCropPadding": "-1", "randomErasing": 1.5}}})"),
                           {});
  const std::vector<std::string> f = Fields(v);
  for (const char* want : {"data.normalize.std[1]", "data.augment.random_crop_padding",
                           "data.augment.random_erasing"}) {
    EXPECT_NE(std::find(f.begin(), f.end(), want), f.end()) << want;
  }
  v = ValidateJobSpec(Parse(R"({"data": {"synthetic": {}, "augment": {"horizontalFlip": true}}})"),
                      {});
  EXPECT_EQ(Fields(v), std::vector<std::string>{"data.augment"});
  v = ValidateJobSpec(Parse(R"({"data": {"builtin": "fashion-mnist",
      "normalize": {"mean": [0.5, 0.5], "std": [0.5]}}})"),
                      {});
  EXPECT_EQ(Fields(v), std::vector<std::string>{"data.normalize"});
}

TEST(JobSpecTest, ResourcesAskForDataParallelWorkersAndAreCheckedByName) {
  auto job = ResolveJobSpec(Parse(R"({"resources": {"workers": 2, "maxRestarts": 1},
      "training": {"batchSize": "256"}})"),
                            {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->workers, 2);
  EXPECT_EQ(job->max_restarts, 1);
  job = ResolveJobSpec(Parse("{}"), {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->workers, 1);  // unset: one worker, DDP's defaults for restarts
  EXPECT_EQ(job->max_restarts, 3);

  auto fields = Fields(ValidateJobSpec(
      Parse(R"({"resources": {"workers": 3, "devicesPerWorker": 1, "maxRestarts": -1},
                "training": {"batchSize": "256"}})"),
      {}));
  EXPECT_EQ(fields, (std::vector<std::string>{"training.batch_size", "resources.devices_per_worker",
                                              "resources.max_restarts"}));
  EXPECT_EQ(Fields(ValidateJobSpec(Parse(R"({"resources": {"workers": -2}})"), {})),
            std::vector<std::string>{"resources.workers"});
  EXPECT_EQ(Fields(ValidateJobSpec(Parse(R"({"resources": {"workers": 100000}})"), {})),
            std::vector<std::string>{"resources.workers"});
  // Ranks that join from a launcher: only for a job of more than one worker.
  EXPECT_EQ(Fields(ValidateJobSpec(Parse(R"({"resources": {"externalWorkers": true}})"), {})),
            std::vector<std::string>{"resources.external_workers"});
  job = ResolveJobSpec(Parse(R"({"resources": {"workers": 2, "externalWorkers": true}})"), {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->external_workers);
  // A CUDA job's ranks run on the server, one per device (whether it has
  // enough devices is the server's question): none join from a launcher.
  EXPECT_TRUE(
      ValidateJobSpec(Parse(R"({"resources": {"workers": 2}, "device": "DEVICE_CUDA"})"), {})
          .empty());
  EXPECT_EQ(Fields(ValidateJobSpec(Parse(R"({"resources": {"workers": 2, "externalWorkers": true},
                                             "device": "DEVICE_CUDA"})"),
                                   {})),
            std::vector<std::string>{"resources.external_workers"});
  // A CNN with batch norm (rank 0's running statistics are broadcast) and a
  // language model (each rank takes its windows) train data-parallel.
  auto resnet = ReadJobSpecFile("examples/fashion_resnet_bf16.json");
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  resnet->mutable_resources()->set_workers(2);
  EXPECT_TRUE(ValidateJobSpec(*resnet, {}).empty());
  EXPECT_TRUE(ValidateJobSpec(Parse(R"({"resources": {"workers": 2}, "model": {"gpt": {}},
                                        "data": {"builtin": "fortunes"}})"),
                              {})
                  .empty());
  auto status = ResolveJobSpec(
      Parse(R"({"resources": {"workers": 3}, "training": {"batchSize": "100"}})"), {});
  EXPECT_EQ(status.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.status().message()).find("multiple of resources.workers (3"),
            std::string::npos)
      << status.status();
}

TEST(JobSpecTest, EightBitOptimizerStatesAndTheirAliases) {
  auto job =
      ResolveJobSpec(Parse(R"({"optimizer": {"adamw": {"stateBits": 8}, "min8bitSize": "1000",
      "fp32StateLayers": ["head"]}})"),
                     {});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->config.optimizer.state_bits, 8);
  EXPECT_EQ(job->config.optimizer.min_8bit_size, 1000);
  EXPECT_EQ(job->config.optimizer.fp32_state_layers, std::set<std::string>{"head"});
  // bitsandbytes' name for it, and the others, in any case.
  for (const auto& [alias, kind, bits] :
       std::vector<std::tuple<std::string, OptimizerSpec::Kind, int>>{
           {"adamw8bit", OptimizerSpec::Kind::kAdamW, 8},
           {"AdamW8bit", OptimizerSpec::Kind::kAdamW, 8},
           {"adamw", OptimizerSpec::Kind::kAdamW, 32},
           {"sgd8bit", OptimizerSpec::Kind::kSgd, 8}}) {
    auto spec = ParseJobSpecJson(
        R"({"optimizer": ")" + alias + R"(", "training": {"seed": "18446744073709551615"}})",
        "alias.json");
    ASSERT_TRUE(spec.ok()) << alias << ": " << spec.status();
    EXPECT_EQ(spec->training().seed(), 18446744073709551615ull);  // no double on the way
    const auto& o = spec->optimizer();
    EXPECT_EQ(o.has_sgd(), kind == OptimizerSpec::Kind::kSgd) << alias;
    EXPECT_EQ(o.has_sgd() ? o.sgd().state_bits() : o.adamw().state_bits(), bits == 8 ? 8 : 0)
        << alias;
  }
  auto unknown = ParseJobSpecJson(R"({"optimizer": "lion"})", "alias.json");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("alias.json: optimizer: unknown name \"lion\""),
            std::string::npos)
      << unknown.status();
  // Each bad field by name.
  auto v = ValidateJobSpec(
      Parse(R"({"optimizer": {"adamw": {"stateBits": 4}, "min8bitSize": "-1"}})"), {});
  EXPECT_EQ(Fields(v),
            (std::vector<std::string>{"optimizer.adamw.state_bits", "optimizer.min_8bit_size"}));
  v = ValidateJobSpec(Parse(R"({"optimizer": {"sgd": {"stateBits": 8}}})"), {});
  EXPECT_EQ(Fields(v), std::vector<std::string>{"optimizer.sgd.state_bits"});
  auto layers = ResolveJobSpec(
      Parse(R"({"optimizer": {"adamw": {"stateBits": 8}, "fp32StateLayers": ["fc1", "wte"]}})"),
      {});
  ASSERT_FALSE(layers.ok());
  EXPECT_NE(layers.status().message().find("optimizer.fp32_state_layers[1]"), std::string::npos)
      << layers.status();
  // Explain counts 8-bit states at their size: 1 byte + 4 per 256 elements.
  MlpSpec mlp;
  mlp.input_dim = 512;
  mlp.hidden = {512};
  mlp.num_classes = 16;
  OptimizerSpec eight;
  eight.state_bits = 8;
  const int64_t full = train::EstimateMemory(mlp, *ResolvePrecision("32-true"), OptimizerSpec(), 8)
                           .optimizer_state_bytes;
  const int64_t small =
      train::EstimateMemory(mlp, *ResolvePrecision("32-true"), eight, 8).optimizer_state_bytes;
  // fc1.weight 512*512 and head.weight 16*512 = 8192 are 8-bit; the biases stay f32.
  const int64_t expect = 2 * ((512 * 512 + 4 * 1024) + (16 * 512 + 4 * 32) + 4 * 512 + 4 * 16);
  EXPECT_EQ(small, expect);
  EXPECT_LT(small, full / 3);
}

TEST(ExplainTest, PlanAndMemoryFollowThePrecision) {
  MlpSpec mlp;
  mlp.input_dim = 8;
  mlp.hidden = {16};
  mlp.num_classes = 4;
  OptimizerSpec adamw;
  auto fp32 = ExplainPrecision(mlp, *ResolvePrecision("32-true"), adamw, 32);
  auto bf16 = ExplainPrecision(mlp, *ResolvePrecision("bf16-mixed"), adamw, 32);
  auto o2 = ExplainPrecision(mlp, *ResolvePrecision("O2"), adamw, 32);
  ASSERT_TRUE(fp32.ok() && bf16.ok() && o2.ok());
  const int64_t params = 8 * 16 + 16 + 16 * 4 + 4;
  EXPECT_EQ(fp32->parameter_count, params);
  ASSERT_EQ(bf16->ops.size(), 4u);  // linear, relu, linear, cross_entropy
  EXPECT_EQ(bf16->ops[0].compute_dtype, DType::kBF16);
  EXPECT_EQ(bf16->ops[3].compute_dtype, DType::kF32);
  EXPECT_EQ(fp32->ops[0].compute_dtype, DType::kF32);
  EXPECT_EQ(fp32->memory.weights_bytes, params * 4);
  EXPECT_EQ(fp32->memory.optimizer_state_bytes, params * 8);
  EXPECT_EQ(o2->memory.weights_bytes, params * 2);
  EXPECT_EQ(o2->memory.master_weights_bytes, params * 4);
  EXPECT_LT(bf16->memory.activation_bytes, fp32->memory.activation_bytes);
}

}  // namespace
}  // namespace ampd::engine
