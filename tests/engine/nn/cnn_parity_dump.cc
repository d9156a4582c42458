// Trains a small CNN for the PyTorch parity test (cnn_torch_parity_test.py)
// and writes what it needs to compare: the initial parameters
// (nn.Sequential names, f32), every step's batch, every step's loss, and the
// batch norm running statistics after the last step.
//   cnn_parity_dump OUT_DIR PRECISION     (32-true or bf16-mixed)
// 10 SGD steps (lr 0.05, momentum 0.9), batch 16 of [3, 12, 12] images:
// conv 8 -> BN -> ReLU -> max pool 2 -> residual (conv 16 stride 2, BN, ReLU,
// conv 16; 1x1 stride-2 projection + BN; ReLU after) -> adaptive avg pool
// 1x1 -> flatten -> linear 10. bf16-mixed is bf16 autocast over f32 weights,
// as torch.autocast("cpu", bfloat16).

#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/amp/precision.h"
#include "engine/autograd/autograd.h"
#include "engine/io/safetensors.h"
#include "engine/nn/model.h"
#include "engine/nn/weights_file.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"
#include "tests/engine/layer_specs.h"

namespace ampd::engine {
namespace {

using nn::LayerKind;
using nn::LayerSpec;

using testing::Conv;
using testing::Layer;

std::vector<std::pair<std::string, Tensor>> Named(const std::vector<nn::Parameter>& ps) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const nn::Parameter& p : ps) out.push_back({p.name, p.value});
  return out;
}

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: cnn_parity_dump OUT_DIR 32-true|bf16-mixed\n");
    return 2;
  }
  const std::string out = argv[1], precision = argv[2];
  nn::SequentialSpec spec;
  spec.input_shape = {3, 12, 12};
  spec.num_classes = 10;
  const LayerSpec pool = testing::MaxPool(2);
  LayerSpec res = Layer(LayerKind::kResidual);
  res.body = {Conv(16, 3, 1, 2), Layer(LayerKind::kBatchNorm2d), Layer(LayerKind::kActivation),
              Conv(16, 3, 1)};
  res.shortcut = LayerSpec::Shortcut::kConv1x1BatchNorm;
  res.activation_after = true;
  LayerSpec gap = Layer(LayerKind::kAdaptiveAvgPool2d);
  LayerSpec head = Layer(LayerKind::kLinear);
  head.out = 10;
  spec.layers = {Conv(8, 3, 1),
                 Layer(LayerKind::kBatchNorm2d),
                 Layer(LayerKind::kActivation),
                 pool,
                 res,
                 gap,
                 Layer(LayerKind::kFlatten),
                 head};
  const amp::PrecisionConfig p = *amp::ResolvePrecision(precision);
  absl::StatusOr<std::unique_ptr<nn::Model>> model = nn::BuildModel(spec, p, 3);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  nn::Model& m = **model;
  if (absl::Status s = io::WriteSafetensors(out + "/init.safetensors", Named(m.parameters()), {});
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  optim::OptimizerSpec o;
  o.kind = optim::OptimizerSpec::Kind::kSgd;
  o.lr = 0.05;
  o.momentum = 0.9;
  optim::Optimizer opt(o, &m.parameters(), p.master_weights);
  std::mt19937 gen(7);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, 9);
  std::ofstream steps(out + "/steps.txt");
  std::ofstream images(out + "/images.f32", std::ios::binary);
  const int64_t batch = 16, dim = 3 * 12 * 12;
  for (int step = 1; step <= 10; ++step) {
    std::vector<float> x(batch * dim);
    for (float& v : x) v = pixel(gen);
    std::vector<int32_t> y(batch);
    for (int32_t& v : y) v = label(gen);
    images.write(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
    opt.ZeroGrad();
    Tensor loss;
    {
      ops::AutocastScope autocast(amp::AutocastRegion(p));
      Tensor logits = m.AsClassifier()->Forward(Tensor::FromVector(x, {batch, dim}), true, 0);
      loss = ops::SoftmaxCrossEntropy(logits, y);
    }
    autograd::Backward(loss);
    opt.CollectGradients();
    opt.Step(o.lr);
    steps.precision(17);
    steps << loss.Item();
    for (int32_t v : y) steps << " " << v;
    steps << "\n";
  }
  if (absl::Status s = io::WriteSafetensors(out + "/buffers.safetensors", Named(m.buffers()), {});
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  // The trained model as a weights file (what a job exports), and its
  // eval-mode logits on one more batch: torch must load the one and
  // reproduce the other.
  std::vector<std::pair<std::string, Tensor>> state = Named(m.parameters());
  for (auto& b : Named(m.buffers())) state.push_back(b);
  const nn::WeightsFileContents file = nn::ExportWeights(spec, state);
  if (absl::Status s =
          io::WriteSafetensors(out + "/final.safetensors", file.tensors, file.metadata);
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::vector<float> x(batch * dim);
  for (float& v : x) v = pixel(gen);
  images.write(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
  Tensor logits;
  {
    ops::AutocastScope autocast(amp::AutocastRegion(p));
    logits = m.AsClassifier()->Forward(Tensor::FromVector(x, {batch, dim}), false, 0);
  }
  std::ofstream eval(out + "/eval_logits.txt");
  eval.precision(9);
  for (float v : logits.ToFloats()) eval << v << "\n";
  return steps.good() && images.good() ? 0 : 1;
}

}  // namespace
}  // namespace ampd::engine

int main(int argc, char** argv) { return ampd::engine::Main(argc, argv); }
