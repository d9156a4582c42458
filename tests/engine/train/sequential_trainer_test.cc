// Sequential models in the trainer: the MLP written as layers trains bit for
// bit as model.mlp; a small CNN (conv, batch norm, pooling, a residual block)
// learns, moves its running statistics, evaluates with them, and resumes
// bitwise from a saved state that carries them.
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/dist/process_group.h"
#include "engine/io/checkpoint.h"
#include "engine/io/safetensors.h"
#include "engine/nn/weights_file.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/engine/layer_specs.h"

namespace ampd::engine {
namespace {

using amp::ResolvePrecision;
using nn::LayerKind;
using nn::LayerSpec;
using nn::MlpSpec;
using nn::Parameter;
using nn::SequentialSpec;
using optim::OptimizerSpec;
using train::StepMetrics;
using train::Trainer;
using train::TrainerCallbacks;
using train::TrainerConfig;
using train::TrainerState;

class Recorder : public TrainerCallbacks {
 public:
  void OnStep(const StepMetrics& m) override { losses.push_back(m.loss); }
  std::vector<double> losses;
};

std::vector<std::vector<uint8_t>> Bytes(const std::vector<Parameter>& ps) {
  std::vector<std::vector<uint8_t>> out;
  for (const Parameter& p : ps) {
    const uint8_t* b = static_cast<const uint8_t*>(p.value.raw());
    out.emplace_back(b, b + p.value.nbytes());
  }
  return out;
}

using testing::Conv;
using testing::Layer;
using testing::Linear;

TrainerConfig Base(const std::string& precision) {
  TrainerConfig c;
  c.precision = *ResolvePrecision(precision);
  c.optimizer.kind = OptimizerSpec::Kind::kAdamW;
  c.optimizer.lr = 3e-3;
  c.training.steps = 40;
  c.training.batch_size = 32;
  c.training.seed = 5;
  return c;
}

// [1, 8, 8] images: noise, plus a bright 2x2 blob somewhere in the
// quadrant the label names (a task for convolutions and pooling, where a
// linear teacher over pixels would not be).
data::Dataset Images(int64_t n, uint64_t seed) {
  data::Dataset d;
  d.num_examples = n;
  d.feature_dim = 64;
  d.num_classes = 4;
  d.example_shape = {1, 8, 8};
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::uniform_int_distribution<int> label(0, 3), jitter(0, 2);
  for (int64_t i = 0; i < n; ++i) {
    const int y = label(gen);
    std::vector<float> img(64);
    for (float& v : img) v = noise(gen);
    const int r0 = (y / 2) * 4 + jitter(gen), c0 = (y % 2) * 4 + jitter(gen);
    for (int r = r0; r < r0 + 2; ++r) {
      for (int c = c0; c < c0 + 2; ++c) img[r * 8 + c] += 1.5f;
    }
    d.features.insert(d.features.end(), img.begin(), img.end());
    d.labels.push_back(y);
  }
  return d;
}

TEST(SequentialTrainerTest, TheMlpAsLayersTrainsBitForBitAsModelMlp) {
  data::Dataset data = Images(256, 1);
  for (const char* precision : {"32-true", "bf16-mixed"}) {
    TrainerConfig mlp_config = Base(precision);
    MlpSpec mlp;
    mlp.input_dim = 64;
    mlp.hidden = {48, 32};
    mlp.num_classes = 4;
    mlp_config.model = mlp;
    TrainerConfig seq_config = Base(precision);
    SequentialSpec seq;
    seq.input_shape = {64};
    seq.num_classes = 4;
    seq.layers = {Linear(48), Layer(LayerKind::kActivation), Linear(32),
                  Layer(LayerKind::kActivation), Linear(4)};
    seq_config.model = seq;
    auto a = *Trainer::Create(mlp_config, &data, nullptr);
    auto b = *Trainer::Create(seq_config, &data, nullptr);
    Recorder ra, rb;
    for (int i = 0; i < 40; ++i) a->RunStep(&ra), b->RunStep(&rb);
    EXPECT_EQ(ra.losses, rb.losses) << precision;
    EXPECT_EQ(Bytes(a->model().parameters()), Bytes(b->model().parameters())) << precision;
  }
}

// [1, 8, 8] -> conv 8 -> BN -> ReLU -> pool -> residual(conv 16 stride 2,
// BN, ReLU, conv 16; 1x1 projection + BN) -> ReLU -> flatten -> linear 4.
SequentialSpec SmallCnn() {
  SequentialSpec s;
  s.input_shape = {};  // from the data
  const LayerSpec pool = testing::MaxPool(2);
  LayerSpec res = Layer(LayerKind::kResidual);
  res.body = {Conv(16, 3, 1, 2), Layer(LayerKind::kBatchNorm2d), Layer(LayerKind::kActivation),
              Conv(16, 3, 1)};
  res.shortcut = LayerSpec::Shortcut::kConv1x1BatchNorm;
  res.activation_after = true;
  s.layers = {Conv(8, 3, 1),
              Layer(LayerKind::kBatchNorm2d),
              Layer(LayerKind::kActivation),
              pool,
              res,
              Layer(LayerKind::kFlatten),
              Linear(4)};
  return s;
}

TrainerConfig CnnConfig(const std::string& precision) {
  TrainerConfig c = Base(precision);
  c.model = SmallCnn();
  nn::FillDataDims(&c.model, 64, 4, {1, 8, 8});
  c.training.steps = 60;
  return c;
}

TEST(SequentialTrainerTest, ASmallCnnLearnsAndItsRunningStatisticsMove) {
  data::Dataset train = Images(512, 2), test = Images(256, 3);
  for (const char* precision : {"32-true", "bf16-mixed"}) {
    auto t = *Trainer::Create(CnnConfig(precision), &train, &test);
    const std::vector<float> rm0 = t->model().buffers()[0].value.ToFloats();
    Recorder r;
    for (int i = 0; i < 60; ++i) t->RunStep(&r);
    double first = 0, last = 0;
    for (int i = 0; i < 10; ++i) first += r.losses[i], last += r.losses[50 + i];
    EXPECT_LT(last, 0.7 * first) << precision;
    EXPECT_NE(t->model().buffers()[0].value.ToFloats(), rm0) << precision;
    // Evaluation uses the running statistics and does not move them.
    const std::vector<float> before = t->model().buffers()[0].value.ToFloats();
    train::EvalMetrics e = t->Evaluate(test);
    EXPECT_GT(e.accuracy, 0.5) << precision;
    EXPECT_EQ(t->model().buffers()[0].value.ToFloats(), before) << precision;
  }
}

TEST(SequentialTrainerTest, ResumeCarriesTheRunningStatisticsBitwise) {
  data::Dataset data = Images(200, 4);
  for (const char* precision : {"32-true", "bf16-mixed"}) {
    const TrainerConfig config = CnnConfig(precision);
    auto full = *Trainer::Create(config, &data, nullptr);
    Recorder all;
    for (int i = 0; i < 30; ++i) full->RunStep(&all);
    auto first = *Trainer::Create(config, &data, nullptr);
    Recorder part;
    for (int i = 0; i < 13; ++i) first->RunStep(&part);
    TrainerState state = first->SaveState();
    int buffers = 0;
    for (const auto& [name, t] : state.tensors) buffers += name.rfind("buffer/", 0) == 0;
    EXPECT_EQ(buffers, 6);
    first.reset();
    auto resumed = *Trainer::Create(config, &data, nullptr);
    ASSERT_TRUE(resumed->LoadState(state).ok());
    for (int i = 13; i < 30; ++i) resumed->RunStep(&part);
    EXPECT_EQ(part.losses, all.losses) << precision;
    EXPECT_EQ(Bytes(resumed->model().parameters()), Bytes(full->model().parameters()));
    EXPECT_EQ(Bytes(resumed->model().buffers()), Bytes(full->model().buffers()));
  }
}

TEST(SequentialTrainerTest, AugmentedRunsResumeBitwiseAndAugmentationChangesTheRun) {
  data::Dataset data = Images(200, 5);
  TrainerConfig plain = CnnConfig("bf16-mixed");
  TrainerConfig config = plain;
  config.transforms.mean = {0.2f};
  config.transforms.std = {0.5f};
  config.transforms.crop_padding = 1;
  config.transforms.horizontal_flip = true;
  config.transforms.erasing = 0.25;
  auto full = *Trainer::Create(config, &data, nullptr);
  Recorder all;
  for (int i = 0; i < 30; ++i) full->RunStep(&all);
  auto first = *Trainer::Create(config, &data, nullptr);
  Recorder part;
  for (int i = 0; i < 17; ++i) first->RunStep(&part);  // mid-epoch (200 / 32)
  TrainerState state = first->SaveState();
  first.reset();
  auto resumed = *Trainer::Create(config, &data, nullptr);
  ASSERT_TRUE(resumed->LoadState(state).ok());
  for (int i = 17; i < 30; ++i) resumed->RunStep(&part);
  EXPECT_EQ(part.losses, all.losses);
  EXPECT_EQ(Bytes(resumed->model().parameters()), Bytes(full->model().parameters()));
  EXPECT_EQ(Bytes(resumed->model().buffers()), Bytes(full->model().buffers()));
  // The same run without the transforms is another run.
  auto untransformed = *Trainer::Create(plain, &data, nullptr);
  Recorder other;
  for (int i = 0; i < 30; ++i) untransformed->RunStep(&other);
  EXPECT_NE(other.losses, all.losses);
}

TEST(SequentialTrainerTest, TransformsNeedImagesAndAValuePerChannel) {
  data::Dataset vectors = Images(64, 6);
  vectors.example_shape.clear();  // as CSV or synthetic data
  TrainerConfig c = CnnConfig("32-true");
  c.transforms.horizontal_flip = true;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(c, &vectors, nullptr);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(t.status().message()).find("data.augment"), std::string::npos);
  data::Dataset images = Images(64, 6);
  c.transforms.mean = {0.1f, 0.2f};  // two values for one channel
  c.transforms.std = {1, 1};
  t = Trainer::Create(c, &images, nullptr);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(t.status().message()).find("data.normalize.mean"), std::string::npos)
      << t.status();
}

TEST(SequentialTrainerTest, ExportedWeightsStartAnotherRunWithTheirRunningStatistics) {
  data::Dataset data = Images(128, 8);
  const TrainerConfig config = CnnConfig("32-true");
  auto t = *Trainer::Create(config, &data, nullptr);
  for (int i = 0; i < 10; ++i) t->RunStep();
  const std::string path = ::testing::TempDir() + "/cnn.safetensors";
  ASSERT_TRUE(io::WriteModelWeights(path, t->SaveState(), config.model).ok());
  absl::StatusOr<io::SafetensorsFile> file = io::ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors.count("1.running_var"));  // as a torch state_dict
  absl::StatusOr<std::map<std::string, Tensor>> weights =
      nn::ImportWeights(config.model, *file, path);
  ASSERT_TRUE(weights.ok()) << weights.status();
  TrainerConfig again = config;
  again.initial_weights = *weights;
  auto u = *Trainer::Create(again, &data, nullptr);
  EXPECT_EQ(Bytes(u->model().parameters()), Bytes(t->model().parameters()));
  EXPECT_EQ(Bytes(u->model().buffers()), Bytes(t->model().buffers()));
  // A file without the running statistics is not this model's.
  std::vector<std::pair<std::string, Tensor>> params_only;
  for (const std::string& name : file->names) {
    if (name.find("running") == std::string::npos)
      params_only.push_back({name, file->tensors.at(name)});
  }
  ASSERT_TRUE(io::WriteSafetensors(path, params_only, {}).ok());
  file = io::ReadSafetensors(path);
  weights = nn::ImportWeights(config.model, *file, path);
  ASSERT_EQ(weights.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(weights.status().message()).find("running_mean"), std::string::npos)
      << weights.status();
}

// DDP's broadcast_buffers: two ranks train a CNN with batch norm, each on
// its half of the batch (its own batch statistics, as DDP without SyncBN);
// after every step both hold rank 0's running statistics and the same
// weights.
TEST(SequentialTrainerTest, DataParallelRanksShareRankZerosRunningStatistics) {
  const data::Dataset train = Images(512, 2);
  std::shared_ptr<dist::RendezvousStore> store = dist::InProcessStore();
  constexpr int kSteps = 8;
  std::vector<std::vector<float>> buffers[2], params[2];  // per rank, per step
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      dist::GlooOptions o;
      o.rank = r;
      o.size = 2;
      o.store = store;
      absl::StatusOr<std::unique_ptr<dist::ProcessGroup>> g = dist::ConnectGloo(o);
      ASSERT_TRUE(g.ok()) << g.status();
      TrainerConfig c = CnnConfig("32-true");
      c.training.batch_size = 64;
      c.process_group = g->get();
      auto t = Trainer::Create(c, &train, nullptr);
      ASSERT_TRUE(t.ok()) << t.status();
      for (int s = 0; s < kSteps; ++s) {
        (*t)->RunStep();
        std::vector<float> b, p;
        for (const nn::Parameter& x : (*t)->model().buffers()) {
          const std::vector<float> v = x.value.ToFloats();
          b.insert(b.end(), v.begin(), v.end());
        }
        for (const nn::Parameter& x : (*t)->model().parameters()) {
          const std::vector<float> v = x.value.ToFloats();
          p.insert(p.end(), v.begin(), v.end());
        }
        buffers[r].push_back(b);
        params[r].push_back(p);
      }
      EXPECT_TRUE((*g)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(buffers[0].size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(buffers[1].size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(buffers[1][s], buffers[0][s]) << "running statistics after step " << s + 1;
    EXPECT_EQ(params[1][s], params[0][s]) << "weights after step " << s + 1;
  }
}

}  // namespace
}  // namespace ampd::engine
