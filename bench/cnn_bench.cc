// CNN training steps on this CPU: images/s in 32-true and bf16-mixed (bf16
// autocast over f32 weights, as torch.autocast), and, when PyTorch is
// importable (bench/torch_cnn_bench.py), PyTorch eager on the same model,
// batch and precision with the ratio. Precisions (and PyTorch) interleave
// round by round; medians are reported.
//
//   bazel run -c opt //bench:cnn_bench
//   bazel run -c opt //bench:cnn_bench -- --torch_python=/path/to/venv/bin/python3
//
// The model (issue 15's): 3 x [conv 3x3 (64, 128, 128 channels), batch norm,
// ReLU, max pool 2] on 28x28 single-channel images, then flatten and a
// linear head to 10 classes; batch 256, AdamW.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/torch_step.h"
#include "engine/amp/precision.h"
#include "engine/autograd/autograd.h"
#include "engine/cpu/host_memory.h"
#include "engine/nn/model.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"

ABSL_FLAG(int64_t, steps, 3, "Timed steps per precision per round");
ABSL_FLAG(int64_t, rounds, 3, "Interleaved rounds (the median is reported)");
ABSL_FLAG(int64_t, warmup, 1, "Untimed steps per precision first");
ABSL_FLAG(int64_t, batch, 256, "Images per step");
ABSL_FLAG(std::string, torch_python, "python3",
          "Python with torch for bench/torch_cnn_bench.py (skipped when torch is not importable)");
ABSL_FLAG(bool, no_torch, false, "Do not run the PyTorch comparison");

namespace ampd::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace nn = engine::nn;
using engine::DType;
using engine::Tensor;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

nn::SequentialSpec Model() {
  nn::SequentialSpec s;
  s.input_shape = {1, 28, 28};
  s.num_classes = 10;
  for (int64_t channels : {64, 128, 128}) {
    nn::LayerSpec conv;
    conv.kind = nn::LayerKind::kConv2d;
    conv.out = channels;
    conv.kernel[0] = conv.kernel[1] = 3;
    conv.padding[0] = conv.padding[1] = 1;
    nn::LayerSpec bn, relu, pool;
    bn.kind = nn::LayerKind::kBatchNorm2d;
    relu.kind = nn::LayerKind::kActivation;
    pool.kind = nn::LayerKind::kMaxPool2d;
    pool.kernel[0] = pool.kernel[1] = 2;
    for (const nn::LayerSpec& l : {conv, bn, relu, pool}) s.layers.push_back(l);
  }
  nn::LayerSpec flatten, head;
  flatten.kind = nn::LayerKind::kFlatten;
  head.kind = nn::LayerKind::kLinear;
  head.out = 10;
  s.layers.push_back(flatten);
  s.layers.push_back(head);
  return s;
}

struct Run {
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<engine::optim::Optimizer> opt;
  engine::amp::PrecisionConfig precision;
  std::vector<double> step_s;
  double last_loss = 0;
};

void Step(Run& r, const Tensor& x, const std::vector<int32_t>& y) {
  r.opt->ZeroGrad();
  Tensor loss;
  {
    engine::ops::AutocastScope autocast(engine::amp::AutocastRegion(r.precision));
    loss = engine::ops::SoftmaxCrossEntropy(r.model->AsClassifier()->Forward(x, true, 0), y);
  }
  engine::autograd::Backward(loss);
  r.opt->CollectGradients();
  r.opt->Step(1e-3);
  r.last_loss = loss.Item();
}

// PyTorch eager on the same model and precision: ms per step, or -1.
double TorchStepMs(const std::string& precision) {
  return bench::TorchStepMs(
      absl::GetFlag(FLAGS_torch_python), "torch_cnn_bench.py",
      absl::StrCat("--precision=", precision, " --batch=", absl::GetFlag(FLAGS_batch), " --steps=",
                   absl::GetFlag(FLAGS_steps), " --warmup=", absl::GetFlag(FLAGS_warmup)),
      "torch_cnn");
}

int Main() {
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  const nn::SequentialSpec spec = Model();
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> pixel(0, 1);
  std::vector<float> images(batch * 28 * 28);
  for (float& v : images) v = pixel(gen);
  std::vector<int32_t> labels(batch);
  for (int32_t& v : labels) v = static_cast<int32_t>(gen() % 10);
  const Tensor x = Tensor::FromVector(images, {batch, 28 * 28});
  std::printf(
      "cnn_bench: 3 x [conv 3x3 64/128/128, BN, ReLU, max pool 2] + linear on 28x28, "
      "batch %lld; %.2fM parameters, %.1f GFLOP per step\n",
      static_cast<long long>(batch), nn::ParameterCount(spec) / 1e6,
      nn::DescribeModel(spec).flops_per_example * batch / 1e9);
  Run runs[2];
  const char* names[2] = {"32-true", "bf16-mixed"};
  for (int i = 0; i < 2; ++i) {
    runs[i].precision = *engine::amp::ResolvePrecision(names[i]);
    runs[i].model = *nn::BuildModel(spec, runs[i].precision, 1);
    engine::optim::OptimizerSpec o;
    o.lr = 1e-3;
    runs[i].opt =
        std::make_unique<engine::optim::Optimizer>(o, &runs[i].model->parameters(), false);
    for (int64_t s = 0; s < absl::GetFlag(FLAGS_warmup); ++s) Step(runs[i], x, labels);
  }
  const bool torch = !absl::GetFlag(FLAGS_no_torch);
  std::vector<double> torch_ms[2];
  for (int64_t round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (int i = 0; i < 2; ++i) {
      const auto t0 = Clock::now();
      for (int64_t s = 0; s < absl::GetFlag(FLAGS_steps); ++s) Step(runs[i], x, labels);
      runs[i].step_s.push_back(Seconds(t0, Clock::now()) / absl::GetFlag(FLAGS_steps));
      if (torch) {
        const double ms = TorchStepMs(names[i]);
        if (ms > 0) torch_ms[i].push_back(ms);
      }
    }
  }
  std::printf("%-11s %9s %10s %9s %12s %8s\n", "precision", "step ms", "images/s", "loss",
              "torch ms", "ratio");
  for (int i = 0; i < 2; ++i) {
    const double s = Median(runs[i].step_s);
    const std::string t = torch_ms[i].empty() ? "-" : absl::StrCat(Median(torch_ms[i]));
    const std::string ratio =
        torch_ms[i].empty() ? "-" : absl::StrCat(Median(torch_ms[i]) / (1e3 * s), "x");
    std::printf("%-11s %9.1f %10.0f %9.4f %12s %8s\n", names[i], 1e3 * s, batch / s,
                runs[i].last_loss, t.c_str(), ratio.c_str());
    std::printf("RESULT cnn_bench precision=%s step_ms=%.2f images_per_s=%.0f%s\n", names[i],
                1e3 * s, batch / s,
                torch_ms[i].empty()
                    ? ""
                    : absl::StrCat(" torch_step_ms=", Median(torch_ms[i]),
                                   " ratio_vs_torch=", Median(torch_ms[i]) / (1e3 * s))
                          .c_str());
  }
  const double own = Median(runs[0].step_s) / Median(runs[1].step_s);
  std::printf("bf16-mixed vs 32-true (ampd): %.2fx\n", own);
  std::printf("RESULT cnn_bench bf16_vs_fp32=%.3f\n", own);
  if (torch && torch_ms[0].empty() && torch_ms[1].empty()) {
    std::printf("PyTorch comparison skipped: torch is not importable by %s\n",
                absl::GetFlag(FLAGS_torch_python).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ampd::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ampd::engine::cpu::KeepHostMemoryMapped();
  return ampd::bench::Main();
}
