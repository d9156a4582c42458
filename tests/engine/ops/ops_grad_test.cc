// Every differentiable op's backward, checked against central finite
// differences in f64.
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/backend/kernels/conv.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/ops/autocast.h"
#include "engine/ops/dropout.h"
#include "engine/ops/ops.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using autograd::Backward;
using autograd::NoGradGuard;
using backend::Conv2dGeometry;
using ops::AdaptiveAvgPool2d;
using ops::Add;
using ops::AutocastScope;
using ops::AvgPool2d;
using ops::BatchNorm;
using ops::CausalSelfAttention;
using ops::Conv2d;
using ops::Dropout;
using ops::Embedding;
using ops::Exp;
using ops::Gelu;
using ops::GeluTanh;
using ops::LayerNorm;
using ops::Linear;
using ops::LmHeadCrossEntropy;
using ops::Log;
using ops::LogSoftmax;
using ops::Matmul;
using ops::MaxPool2d;
using ops::Mean;
using ops::Mul;
using ops::MulScalar;
using ops::Relu;
using ops::Reshape;
using ops::Softmax;
using ops::SoftmaxCrossEntropy;
using ops::Square;
using ops::Sub;
using ops::Sum;

namespace {

Tensor Random(const std::vector<int64_t>& shape, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return Tensor::FromDoubles(v, shape, DType::kF64);
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Reduces any output to a scalar with fixed random weights, so every output
// element's gradient matters.
Tensor ToScalar(const Tensor& y) {
  if (y.numel() == 1) return y;
  return Sum(Mul(y, Random(y.shape(), 99)));
}

void CheckGradients(const std::string& name, const Fn& fn, std::vector<Tensor> inputs,
                    double tol = 1e-6) {
  for (Tensor& t : inputs) t.set_requires_grad(true);
  Tensor out = ToScalar(fn(inputs));
  Backward(out);
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    ASSERT_TRUE(x.grad().defined()) << name << ": input " << i << " got no gradient";
    std::vector<double> analytic = x.grad().ToDoubles();
    double* data = x.data<double>();
    for (int64_t k = 0; k < x.numel(); ++k) {
      NoGradGuard no_grad;
      const double saved = data[k];
      data[k] = saved + h;
      const double up = ToScalar(fn(inputs)).ToDoubles()[0];
      data[k] = saved - h;
      const double down = ToScalar(fn(inputs)).ToDoubles()[0];
      data[k] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[k], numeric, tol * std::max(1.0, std::abs(numeric)))
          << name << ": input " << i << " element " << k;
    }
  }
}

TEST(OpsGradTest, Matmul) {
  CheckGradients("matmul", [](auto& in) { return Matmul(in[0], in[1]); },
                 {Random({3, 4}, 1), Random({4, 5}, 2)});
}

TEST(OpsGradTest, LinearWithAndWithoutBias) {
  CheckGradients("linear", [](auto& in) { return Linear(in[0], in[1], in[2]); },
                 {Random({3, 4}, 1), Random({5, 4}, 2), Random({5}, 3)});
  CheckGradients("linear_nobias", [](auto& in) { return Linear(in[0], in[1], Tensor()); },
                 {Random({2, 3}, 4), Random({4, 3}, 5)});
}

TEST(OpsGradTest, BinaryOpsWithBroadcast) {
  for (const char* op : {"add", "sub", "mul"}) {
    auto fn = [op](const std::vector<Tensor>& in) {
      std::string o = op;
      return o == "add" ? Add(in[0], in[1]) : o == "sub" ? Sub(in[0], in[1]) : Mul(in[0], in[1]);
    };
    CheckGradients(std::string(op) + "_full", fn, {Random({3, 4}, 1), Random({3, 4}, 2)});
    CheckGradients(std::string(op) + "_row", fn, {Random({3, 4}, 3), Random({4}, 4)});
    CheckGradients(std::string(op) + "_scalar", fn, {Random({3, 4}, 5), Random({}, 6)});
  }
}

TEST(OpsGradTest, Activations) {
  // Away from relu's kink at 0, where the derivative is not defined.
  Tensor x = Random({4, 5}, 7, 0.1, 1.0);
  Tensor signs = Random({4, 5}, 8);
  std::vector<double> v = x.ToDoubles(), s = signs.ToDoubles();
  for (size_t i = 0; i < v.size(); ++i) v[i] = s[i] < 0 ? -v[i] : v[i];
  CheckGradients("relu", [](auto& in) { return Relu(in[0]); }, {Tensor::FromDoubles(v, {4, 5})});
  CheckGradients("gelu", [](auto& in) { return Gelu(in[0]); }, {Random({4, 5}, 9, -3, 3)});
  CheckGradients("gelu_tanh", [](auto& in) { return GeluTanh(in[0]); },
                 {Random({4, 5}, 15, -3, 3)});
  CheckGradients("exp", [](auto& in) { return Exp(in[0]); }, {Random({3, 3}, 10)});
  CheckGradients("log", [](auto& in) { return Log(in[0]); }, {Random({3, 3}, 11, 0.5, 2)});
  CheckGradients("pow", [](auto& in) { return Square(in[0]); }, {Random({3, 3}, 12)});
  CheckGradients("mul_scalar", [](auto& in) { return MulScalar(in[0], -2.5); },
                 {Random({3, 3}, 13)});
}

// GPT-2's GELU, as torch.nn.functional.gelu(x, approximate="tanh") (values
// from the closed form in f64), and not the erf GELU.
TEST(OpsGradTest, GeluTanhIsTheTanhApproximation) {
  const Tensor x = Tensor::FromDoubles({1.0, -2.0, 0.5, 3.0}, {4}, DType::kF64);
  const std::vector<double> got = GeluTanh(x).ToDoubles();
  const std::vector<double> want = {0.8411919906082768, -0.04540230591222494, 0.34571400982514394,
                                    2.996362607918227};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-15) << i;
  EXPECT_GT(std::fabs(Gelu(x).ToDoubles()[3] - got[3]), 3e-4);  // erf's is another function
}

// q, k and v all get gradients; two heads, several queries per row of keys.
TEST(OpsGradTest, CausalSelfAttention) {
  CheckGradients("scaled_dot_product_attention",
                 [](auto& in) { return CausalSelfAttention(in[0], 5, 2); },
                 {Random({2 * 5, 24}, 16, -1.5, 1.5)});
}

// With dropout on the probabilities: the backward regenerates the forward's
// mask from the seed (a different mask would fail the check).
TEST(OpsGradTest, CausalSelfAttentionWithDropout) {
  CheckGradients("scaled_dot_product_attention dropout",
                 [](auto& in) { return CausalSelfAttention(in[0], 5, 2, 0.4, 9); },
                 {Random({2 * 5, 24}, 19, -1.5, 1.5)});
}

TEST(OpsGradTest, LmHeadCrossEntropy) {
  CheckGradients("lm_head_cross_entropy",
                 [](auto& in) {
                   return LmHeadCrossEntropy(in[0], in[1], {3, 0, 4, 4, 1}, 2);
                 },
                 {Random({5, 4}, 17), Random({6, 4}, 18)});
}

TEST(OpsGradTest, Conv2d) {
  Conv2dGeometry plain;
  CheckGradients("conv2d", [&](auto& in) { return Conv2d(in[0], in[1], in[2], plain); },
                 {Random({2, 3, 5, 6}, 1), Random({4, 3, 3, 2}, 2), Random({4}, 3)});
  // Stride, padding and dilation differ per dim; no bias.
  Conv2dGeometry g;
  g.stride[0] = 2, g.stride[1] = 1;
  g.padding[0] = 1, g.padding[1] = 2;
  g.dilation[0] = 1, g.dilation[1] = 2;
  CheckGradients("conv2d_strided", [&](auto& in) { return Conv2d(in[0], in[1], Tensor(), g); },
                 {Random({2, 2, 6, 5}, 4), Random({3, 2, 3, 3}, 5)});
  // Two groups: output channels 0-1 see input channels 0-1, 2-3 see 2-3.
  Conv2dGeometry grouped;
  grouped.groups = 2;
  grouped.padding[0] = grouped.padding[1] = 1;
  CheckGradients("conv2d_grouped", [&](auto& in) { return Conv2d(in[0], in[1], in[2], grouped); },
                 {Random({1, 4, 4, 4}, 6), Random({4, 2, 3, 3}, 7), Random({4}, 8)});
}

TEST(OpsGradTest, Pooling) {
  // Distinct values, so no max window has a tie that a nudge would flip.
  std::vector<double> v(2 * 3 * 7 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.0 + 0.37 * i) + 0.001 * i;
  Tensor x = Tensor::FromDoubles(v, {2, 3, 7, 6});
  CheckGradients("max_pool2d", [](auto& in) { return MaxPool2d(in[0], 2); }, {x.Clone()});
  CheckGradients("max_pool2d_padded", [](auto& in) { return MaxPool2d(in[0], 3, 2, 1, 2); },
                 {x.Clone()});
  CheckGradients("avg_pool2d", [](auto& in) { return AvgPool2d(in[0], 3, 2, 1); }, {x.Clone()});
  CheckGradients("avg_pool2d_exclude_pad",
                 [](auto& in) { return AvgPool2d(in[0], 3, 2, 1, /*count_include_pad=*/false); },
                 {x.Clone()});
  // 7x6 -> 3x4: overlapping windows of unequal sizes.
  CheckGradients("adaptive_avg_pool2d", [](auto& in) { return AdaptiveAvgPool2d(in[0], 3, 4); },
                 {x.Clone()});
}

TEST(OpsGradTest, BatchNormTrainingAndEval) {
  for (bool training : {true, false}) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{3, 2, 3, 2}, std::vector<int64_t>{5, 3}}) {
      const int64_t c = shape[1];
      Tensor rm = Random({c}, 11), rv = Random({c}, 12, 0.5, 2.0);
      CheckGradients(training ? "batch_norm_train" : "batch_norm_eval",
                     [&](auto& in) { return BatchNorm(in[0], in[1], in[2], rm, rv, training); },
                     {Random(shape, 13), Random({c}, 14), Random({c}, 15)});
    }
  }
}

TEST(OpsGradTest, ReshapeIsAViewWithAGradient) {
  Tensor x = Random({2, 3, 4}, 16);
  Tensor y = Reshape(x, {6, 4});
  EXPECT_EQ(y.data<double>(), x.data<double>());
  CheckGradients("reshape",
                 [](auto& in) {
                   return Mul(Reshape(in[0], {4, 6}), in[1]);
                 },
                 {Random({2, 3, 4}, 17), Random({4, 6}, 18)});
}

TEST(OpsGradTest, SoftmaxAndLogSoftmax) {
  CheckGradients("softmax", [](auto& in) { return Softmax(in[0]); }, {Random({3, 6}, 14, -2, 2)});
  CheckGradients("log_softmax", [](auto& in) { return LogSoftmax(in[0]); },
                 {Random({3, 6}, 15, -2, 2)});
}

TEST(OpsGradTest, LayerNorm) {
  CheckGradients(
      "layer_norm", [](auto& in) { return LayerNorm(in[0], in[1], in[2]); },
      {Random({3, 6}, 16, -2, 2), Random({6}, 17, 0.5, 1.5), Random({6}, 18)}, 1e-5);
}

TEST(OpsGradTest, SoftmaxCrossEntropy) {
  const std::vector<int32_t> labels = {2, 0, 4};
  CheckGradients("cross_entropy", [&](auto& in) { return SoftmaxCrossEntropy(in[0], labels); },
                 {Random({3, 5}, 19, -3, 3)});
}

TEST(OpsGradTest, EmbeddingAccumulatesRepeatedIds) {
  const std::vector<int32_t> ids = {1, 3, 1, 0};
  CheckGradients("embedding", [&](auto& in) { return Embedding(in[0], ids); },
                 {Random({5, 3}, 20)});
}

TEST(OpsGradTest, DropoutAndReductions) {
  CheckGradients("dropout", [](auto& in) { return Dropout(in[0], 0.3, 42, true); },
                 {Random({4, 8}, 21)});
  CheckGradients("sum", [](auto& in) { return Sum(in[0]); }, {Random({3, 4}, 22)});
  CheckGradients("mean", [](auto& in) { return Mean(in[0]); }, {Random({3, 4}, 23)});
}

TEST(OpsGradTest, ChainOfOpsLikeAnMlp) {
  const std::vector<int32_t> labels = {1, 0, 2};
  CheckGradients(
      "mlp",
      [&](auto& in) {
        Tensor h = Gelu(Linear(in[0], in[1], in[2]));
        h = LayerNorm(h, in[3], in[4]);
        return SoftmaxCrossEntropy(Linear(h, in[5], Tensor()), labels);
      },
      {Random({3, 4}, 24), Random({6, 4}, 25), Random({6}, 26), Random({6}, 27, 0.5, 1.5),
       Random({6}, 28), Random({3, 6}, 29)},
      1e-5);
}

TEST(OpsGradTest, DropoutIsSeededAndScalesKeptValues) {
  Tensor x = Tensor::Full({1000}, DType::kF32, 1.0);
  std::vector<float> a = Dropout(x, 0.25, 7, true).ToFloats();
  std::vector<float> b = Dropout(x, 0.25, 7, true).ToFloats();
  std::vector<float> c = Dropout(x, 0.25, 8, true).ToFloats();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int kept = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6) << v;
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept, 750, 60);
  EXPECT_EQ(Dropout(x, 0.25, 7, false).ToFloats(), x.ToFloats());
}

// A data-parallel rank's samples take the whole batch's masks: dropout of
// samples [2, 4) of 4 under DropoutShardScope(2, 2) is the second half of
// the whole batch's, bit for bit, and so is attention's (its probabilities'
// mask runs over (sequence, head, i, j)); rank 0 (first 0) is unchanged.
TEST(OpsGradTest, AShardsDropoutMasksAreTheWholeBatchs) {
  for (uint64_t s : {0ull, 1ull, 0xFFFFFFFFFFFFFFFFull}) {
    for (uint64_t k : {1ull, 77ull, 1ull << 40}) {
      EXPECT_EQ(backend::DropoutHash(backend::DropoutSeedAt(s, k), 5),
                backend::DropoutHash(s, 5 + k));
    }
  }
  const Tensor x = Random({4, 50}, 40);
  const std::vector<double> whole = Dropout(x, 0.5, 3, true).ToDoubles();
  const Tensor second_half = Tensor::FromDoubles(
      std::vector<double>(x.ToDoubles().begin() + 100, x.ToDoubles().end()), {2, 50}, DType::kF64);
  std::vector<double> shard;
  {
    ops::DropoutShardScope scope(2, 2);
    shard = Dropout(second_half, 0.5, 3, true).ToDoubles();
  }
  EXPECT_EQ(shard, std::vector<double>(whole.begin() + 100, whole.end()));
  EXPECT_NE(Dropout(second_half, 0.5, 3, true).ToDoubles(), shard) << "outside the scope";

  const int64_t T = 6, H = 2, C = 8;  // qkv rows: 4 sequences of 6
  const Tensor qkv = Random({4 * T, 3 * C}, 41);
  const std::vector<double> all = CausalSelfAttention(qkv, T, H, 0.4, 9).ToDoubles();
  const std::vector<double> q = qkv.ToDoubles();
  const Tensor last_two = Tensor::FromDoubles(
      std::vector<double>(q.begin() + 2 * T * 3 * C, q.end()), {2 * T, 3 * C}, DType::kF64);
  std::vector<double> attention_shard;
  {
    ops::DropoutShardScope scope(2, 2);
    attention_shard = CausalSelfAttention(last_two, T, H, 0.4, 9).ToDoubles();
  }
  EXPECT_EQ(attention_shard, std::vector<double>(all.begin() + 2 * T * C, all.end()));
  EXPECT_NE(CausalSelfAttention(last_two, T, H, 0.4, 9).ToDoubles(), attention_shard);
}

TEST(OpsGradTest, GradientsAccumulateAcrossBackwardCalls) {
  Tensor w = Random({2, 2}, 30).set_requires_grad(true);
  Tensor x = Random({3, 2}, 31);
  Backward(Sum(Matmul(x, w)));
  std::vector<double> once = w.grad().ToDoubles();
  Backward(Sum(Matmul(x, w)));
  std::vector<double> twice = w.grad().ToDoubles();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_DOUBLE_EQ(twice[i], 2 * once[i]);
}

// Calls through the CPU's Matmul and Conv2dBackwardData kernels, counted.
int matmul_calls = 0, conv_data_calls = 0;
backend::MatmulKernel::Fn real_matmul = nullptr;
backend::Conv2dBackwardDataKernel::Fn real_conv_data = nullptr;
Tensor CountedMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb, DType out) {
  ++matmul_calls;
  return real_matmul(a, b, ta, tb, out);
}
Tensor CountedConvData(const Tensor& g, const Tensor& w, const std::vector<int64_t>& x_shape,
                       const Conv2dGeometry& geo, DType out) {
  ++conv_data_calls;
  return real_conv_data(g, w, x_shape, geo, out);
}

// A first layer's input (a batch of images) asks for no gradient: its
// backward GEMM or convolution is not run, and the weights' gradients are
// the same as when the input's gradient is computed too.
TEST(OpsGradTest, AnInputThatNeedsNoGradientGetsNoneAndCostsNoKernel) {
  real_matmul = backend::Kernel<backend::MatmulKernel>(Device::kCpu);
  real_conv_data = backend::Kernel<backend::Conv2dBackwardDataKernel>(Device::kCpu);
  backend::RegisterKernel<backend::MatmulKernel>(Device::kCpu, &CountedMatmul);
  backend::RegisterKernel<backend::Conv2dBackwardDataKernel>(Device::kCpu, &CountedConvData);
  Conv2dGeometry geo;
  geo.padding[0] = geo.padding[1] = 1;
  for (bool input_grad : {false, true}) {
    SCOPED_TRACE(input_grad ? "input needs a gradient" : "input needs none");
    Tensor x = Random({8, 5}, 1), w = Random({3, 5}, 2), b = Random({3}, 3);
    Tensor img = Random({2, 1, 6, 6}, 4), k = Random({4, 1, 3, 3}, 5);
    x.set_requires_grad(input_grad);
    img.set_requires_grad(input_grad);
    w.set_requires_grad(true);
    k.set_requires_grad(true);
    const Tensor loss = Add(Mean(Linear(x, w, b)), Mean(Conv2d(img, k, Tensor(), geo)));
    matmul_calls = conv_data_calls = 0;  // the backward's calls only
    Backward(loss);
    EXPECT_EQ(matmul_calls, input_grad ? 2 : 1);
    EXPECT_EQ(conv_data_calls, input_grad ? 1 : 0);
    EXPECT_EQ(x.grad().defined(), input_grad);
    EXPECT_EQ(img.grad().defined(), input_grad);
    ASSERT_TRUE(w.grad().defined());
    ASSERT_TRUE(k.grad().defined());
    // dMean/dy = 1/24 everywhere, so dW[o, i] = sum over rows of x[:, i] / 24.
    const std::vector<double> xs = x.ToDoubles(), dw = w.grad().ToDoubles();
    for (int64_t o = 0; o < 3; ++o) {
      for (int64_t i = 0; i < 5; ++i) {
        double want = 0;
        for (int64_t r = 0; r < 8; ++r) want += xs[r * 5 + i] / 24.0;
        EXPECT_NEAR(dw[o * 5 + i], want, 1e-6) << o << " " << i;
      }
    }
  }
  backend::RegisterKernel<backend::MatmulKernel>(Device::kCpu, real_matmul);
  backend::RegisterKernel<backend::Conv2dBackwardDataKernel>(Device::kCpu, real_conv_data);
}

// Data-parallel training all-reduces a weight's gradient from the moment
// the backward calls it final (on_leaf). Linear and Conv2d hand their
// parameters' gradients over before computing their input's, so that moment
// comes before that GEMM or convolution, not after it; under autocast too,
// where the weight reaches the layer through a cast. A weight used twice is
// final once, after its last use, with both uses summed.
TEST(OpsGradTest, AWeightsGradientIsFinalBeforeItsLayersInputGradientIsComputed) {
  real_matmul = backend::Kernel<backend::MatmulKernel>(Device::kCpu);
  real_conv_data = backend::Kernel<backend::Conv2dBackwardDataKernel>(Device::kCpu);
  backend::RegisterKernel<backend::MatmulKernel>(Device::kCpu, &CountedMatmul);
  backend::RegisterKernel<backend::Conv2dBackwardDataKernel>(Device::kCpu, &CountedConvData);
  for (bool autocast : {false, true}) {
    SCOPED_TRACE(autocast ? "bf16 autocast" : "f32");
    Tensor x = Random({8, 5}, 1), w1 = Random({6, 5}, 2), b1 = Random({6}, 3);
    Tensor w2 = Random({3, 6}, 4), b2 = Random({3}, 5);
    Tensor img = Random({2, 1, 6, 6}, 6), k1 = Random({2, 1, 3, 3}, 7),
           k2 = Random({2, 2, 3, 3}, 8);
    for (Tensor* p : {&w1, &b1, &w2, &b2, &k1, &k2}) p->set_requires_grad(true);
    Conv2dGeometry geo;
    geo.padding[0] = geo.padding[1] = 1;
    Tensor loss;
    {
      AutocastScope region(autocast, DType::kBF16);
      loss = Add(Mean(Linear(Relu(Linear(x, w1, b1)), w2, b2)),
                 Mean(Conv2d(Relu(Conv2d(img, k1, Tensor(), geo)), k2, Tensor(), geo)));
    }
    std::map<const void*, std::pair<int, int>> final_at;  // leaf -> (matmuls, conv data) then
    int finals = 0;
    matmul_calls = conv_data_calls = 0;
    autograd::Backward(loss, Tensor(), [&](const Tensor& leaf) {
      ++finals;
      final_at[leaf.impl()] = {matmul_calls, conv_data_calls};
    });
    EXPECT_EQ(finals, 6);
    // Layer 2: its bias before any GEMM, its weight after its dW GEMM (dX
    // comes after); layer 1: after all three (dW2, dX2, dW1; the input x
    // needs no gradient).
    EXPECT_EQ(final_at[b2.impl()].first, 0);
    EXPECT_EQ(final_at[w2.impl()].first, 1);
    EXPECT_EQ(final_at[w1.impl()].first, 3);
    EXPECT_EQ(final_at[k2.impl()].second, 0);
    EXPECT_EQ(final_at[k1.impl()].second, 1);
    EXPECT_EQ(matmul_calls, 3);
    EXPECT_EQ(conv_data_calls, 1);
  }
  // One weight, two uses: final once, after both, and summed.
  Tensor x = Random({4, 5}, 9), w = Random({3, 5}, 10).set_requires_grad(true);
  autograd::Backward(Mean(Linear(x, w, Tensor())));
  const std::vector<float> once = w.grad().ToFloats();
  Tensor w_twice = Random({3, 5}, 10).set_requires_grad(true);
  int finals = 0;
  std::vector<float> at_final;
  autograd::Backward(Add(Mean(Linear(x, w_twice, Tensor())), Mean(Linear(x, w_twice, Tensor()))),
                     Tensor(), [&](const Tensor& leaf) {
                       ++finals;
                       at_final = leaf.grad().ToFloats();
                     });
  EXPECT_EQ(finals, 1);
  ASSERT_EQ(at_final.size(), once.size());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(at_final[i], 2 * once[i]) << i;
  backend::RegisterKernel<backend::MatmulKernel>(Device::kCpu, real_matmul);
  backend::RegisterKernel<backend::Conv2dBackwardDataKernel>(Device::kCpu, real_conv_data);
}

}  // namespace
}  // namespace ampd::engine
