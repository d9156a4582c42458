// Every CUDA kernel against the CPU backend (the reference), with per-dtype
// tolerances; cuBLASLt GEMMs and epilogues against f64 references; the AMP
// kernels against the reference implementations of the device AMP API; the
// allocator's no-malloc steady state; errors as statuses; and a training run
// on the GPU against the same run on the CPU.
//
// Needs an NVIDIA GPU: without one every test reports a skip with the reason
// (tests/engine/cuda/BUILD tags it "gpu"). tools/gpu_bundle packs it for a
// GPU machine.

#include "engine/cuda/cuda_backend.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/grad_scaler.h"
#include "engine/amp/precision.h"
#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/attention.h"
#include "engine/backend/kernels/batch_norm.h"
#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/conv.h"
#include "engine/backend/kernels/cross_entropy.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/embedding.h"
#include "engine/backend/kernels/fp8.h"
#include "engine/backend/kernels/gelu_mlp.h"
#include "engine/backend/kernels/layer_norm.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/backend/kernels/pooling.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/backend/kernels/softmax.h"
#include "engine/backend/quant_map.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/data/dataset.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/fp8_linear.h"
#include "engine/ops/lm_head.h"
#include "engine/ops/reductions.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "tests/engine/mlp_config.h"
#include "tests/engine/synthetic_data.h"

namespace ampd::engine {

using backend::AddInPlaceKernel;
using backend::AmpUpdateScale;
using backend::AttentionDropout;
using backend::AttentionResult;
using backend::Backend;
using backend::BackendFor;
using backend::BatchNormBackwardKernel;
using backend::BatchNormGrads;
using backend::BatchNormKernel;
using backend::BatchNormResult;
using backend::BinaryKernel;
using backend::CachedAttentionKernel;
using backend::CastKernel;
using backend::CausalAttentionBackwardKernel;
using backend::CausalAttentionKernel;
using backend::Conv2dBackwardDataKernel;
using backend::Conv2dBackwardWeightKernel;
using backend::Conv2dGeometry;
using backend::Conv2dKernel;
using backend::Conv2dWeightGrads;
using backend::CrossEntropyBackwardKernel;
using backend::CrossEntropyKernel;
using backend::CrossEntropyResult;
using backend::DeviceAmpState;
using backend::DropoutKernel;
using backend::EmbeddingBackwardKernel;
using backend::EmbeddingKernel;
using backend::Fp8CastKernel;
using backend::Fp8CastTransposeKernel;
using backend::Fp8CastTransposeResult;
using backend::Fp8DecodeKernel;
using backend::Fp8MatmulKernel;
using backend::Fp8UpdateScalingKernel;
using backend::GradScalerState;
using backend::Kernel;
using backend::LayerNormBackwardKernel;
using backend::LayerNormGrads;
using backend::LayerNormKernel;
using backend::LayerNormResult;
using backend::LinearGeluTanhKernel;
using backend::LinearKernel;
using backend::MatmulDGeluTanhKernel;
using backend::MatmulKernel;
using backend::NonFiniteCheck;
using backend::Pool2dBackwardKernel;
using backend::Pool2dGeometry;
using backend::Pool2dKernel;
using backend::ScaleKernel;
using backend::ScaleUpdateOptions;
using backend::SoftmaxBackwardKernel;
using backend::SoftmaxKernel;
using backend::SumAllKernel;
using backend::SumRowsKernel;
using backend::UnaryBackwardKernel;
using backend::UnaryKernel;
using nn::MlpSpec;
using ops::kOpDescriptors;
using ops::OpDescriptor;
using optim::OptimizerSpec;
using train::StepMetrics;
using train::Trainer;
using train::TrainerConfig;

namespace {

constexpr DType kLowAndF32[] = {DType::kF32, DType::kF16, DType::kBF16};

// Relative tolerance for one result element: a couple of ulps of the stored
// type (GPU and CPU sum in different orders and the GPU may fuse multiply-adds).
double Tol(DType d) {
  switch (d) {
    case DType::kF32:
      return 2e-5;
    case DType::kF16:
      return 2e-3;
    case DType::kBF16:
      return 1.6e-2;
    case DType::kF64:
      return 1e-12;
    case DType::kU8:  // storage only: copied, never computed
      return 0;
  }
  return 0;
}

Tensor Random(const std::vector<int64_t>& shape, DType dtype, uint32_t seed, double lo = -2,
              double hi = 2) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(n);
  for (double& x : v) x = u(gen);
  return Tensor::FromDoubles(v, shape, dtype);
}

void ExpectClose(const Tensor& gpu, const Tensor& cpu, double rel, const std::string& what) {
  ASSERT_EQ(gpu.device(), Device::kCuda) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const std::vector<double> g = gpu.ToDoubles(), c = cpu.ToDoubles();
  int bad = 0;
  for (size_t i = 0; i < c.size() && bad < 5; ++i) {
    const bool same_nonfinite = !std::isfinite(c[i]) && (std::isnan(c[i]) == std::isnan(g[i])) &&
                                (std::isnan(c[i]) || c[i] == g[i]);
    if (same_nonfinite) continue;
    if (!(std::fabs(g[i] - c[i]) <= rel * std::max(1.0, std::fabs(c[i])))) {
      ADD_FAILURE() << what << ": element " << i << " gpu " << g[i] << " cpu " << c[i];
      ++bad;
    }
  }
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Backend*> be = BackendFor(Device::kCuda);
    if (!be.ok()) GTEST_SKIP() << "no usable GPU: " << be.status().message();
    gpu_ = *be;
  }
  void TearDown() override {
    if (gpu_) {
      EXPECT_TRUE(gpu_->Health().ok()) << gpu_->Health();
    }
  }
  static Tensor G(const Tensor& t) { return t.To(Device::kCuda); }
  Backend& cpu() { return cpu::CpuBackend(); }
  // A kernel of each device (kernel_registry.h): the CPU's is the reference.
  template <typename K>
  static typename K::Fn Cpu() {
    return Kernel<K>(Device::kCpu);
  }
  template <typename K>
  static typename K::Fn Gpu() {
    return Kernel<K>(Device::kCuda);
  }
  static void CheckTensorCoreAttention(cuda::FlashKernels kernel);
  Backend* gpu_ = nullptr;
};

// Byte tensors (FP8 and 8-bit optimizer codes) fill byte by byte: a fill
// once wrote a double per element into them.
TEST_F(CudaBackendTest, FillingByteTensorsWritesBytes) {
  Tensor t = gpu_->Allocate({3, 37}, DType::kU8, true);
  Tensor guard = gpu_->Allocate({64}, DType::kU8, true);
  gpu_->Fill(t, 0x38);
  ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
  EXPECT_EQ(t.ToDoubles(), std::vector<double>(3 * 37, 56.0));
  EXPECT_EQ(guard.ToDoubles(), std::vector<double>(64, 0.0));
}

TEST_F(CudaBackendTest, CastsAreBitExact) {
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
      Tensor x = Random({1000}, from, 1, -70000, 70000);
      Tensor want = Cpu<CastKernel>()(x, to);
      Tensor got = Gpu<CastKernel>()(G(x), to);
      EXPECT_EQ(got.ToDoubles(), want.ToDoubles()) << DTypeName(from) << "->" << DTypeName(to);
    }
  }
}

TEST_F(CudaBackendTest, HasAKernelForEveryOpTheEngineHas) {
  for (const OpDescriptor& d : kOpDescriptors) EXPECT_TRUE(gpu_->HasKernel(d.id)) << d.name;
}

TEST_F(CudaBackendTest, UnaryOpsAndTheirGradients) {
  for (DType d : kLowAndF32) {
    for (OpId op : {OpId::kRelu, OpId::kGelu, OpId::kGeluTanh, OpId::kExp, OpId::kLog, OpId::kNeg,
                    OpId::kSquare}) {
      const bool positive = op == OpId::kLog;
      Tensor x = Random({33, 65}, d, 2, positive ? 0.1 : -3, 3);
      Tensor dy = Random({33, 65}, d, 3);
      const std::string what = std::string(DTypeName(d)) + " op " + std::to_string(int(op));
      ExpectClose(Gpu<UnaryKernel>()(op, G(x)), Cpu<UnaryKernel>()(op, x), Tol(d), what);
      ExpectClose(Gpu<UnaryBackwardKernel>()(op, G(x), G(dy)),
                  Cpu<UnaryBackwardKernel>()(op, x, dy), Tol(d), what + " backward");
    }
  }
}

TEST_F(CudaBackendTest, BinaryOpsWithEveryBroadcastAndMixedDtypes) {
  for (DType d : kLowAndF32) {
    Tensor a = Random({17, 40}, d, 4);
    for (const std::vector<int64_t>& bshape :
         std::vector<std::vector<int64_t>>{{17, 40}, {40}, {1}}) {
      // b in every dtype: a promoted binary reads a narrower input as it is
      // and widens it as it loads (OpDispatch::WidenInKernel).
      for (DType bd : kLowAndF32) {
        Tensor b = Random(bshape, bd, 5);
        for (OpId op : {OpId::kAdd, OpId::kSub, OpId::kMul}) {
          for (DType out : {d, DType::kF32}) {
            ExpectClose(Gpu<BinaryKernel>()(op, G(a), G(b), out),
                        Cpu<BinaryKernel>()(op, a, b, out), Tol(out),
                        "binary " + std::to_string(int(op)) + " " + std::string(DTypeName(d)) +
                            " with " + std::string(DTypeName(bd)) + "[" +
                            std::to_string(b.numel()) + "]");
          }
        }
      }
    }
    ExpectClose(Gpu<ScaleKernel>()(G(a), 0.37, d), Cpu<ScaleKernel>()(a, 0.37, d), Tol(d), "scale");
    Tensor x = Random({17, 40}, d, 6), xg = G(x), y = Random({17, 40}, d, 7);
    Cpu<AddInPlaceKernel>()(x, y, -0.5);
    Gpu<AddInPlaceKernel>()(xg, G(y), -0.5);
    ExpectClose(xg, x, Tol(d), "add in place");
  }
}

// A device copy of `t` that starts one element past a 16-byte boundary, as
// a view of rows of a flat tensor can (Tensor::Rows): the kernels that use
// 16-byte accesses must see it and take their element-wise path, or a GPU
// faults ("misaligned address"; the emulator checks every such access).
Tensor OffTheGrid(const Tensor& t) {
  std::vector<double> v = t.ToDoubles();
  v.insert(v.begin(), 0.0);
  const Tensor flat = Tensor::FromDoubles(v, {static_cast<int64_t>(v.size())}, t.dtype());
  return flat.To(Device::kCuda).Rows(1, 1 + t.numel()).Reshape(t.shape());
}

TEST_F(CudaBackendTest, VectorisedKernelsTakeMisalignedViewsElementByElement) {
  for (DType d : kLowAndF32) {
    const std::string dt(DTypeName(d));
    const Tensor x = Random({6, 64}, d, 61), y = Random({6, 64}, d, 62);
    const Tensor xg = OffTheGrid(x), yg = OffTheGrid(y);
    ASSERT_NE(reinterpret_cast<uintptr_t>(xg.raw()) % 16, 0u);
    for (DType to : kLowAndF32) {
      EXPECT_EQ(Gpu<CastKernel>()(xg, to).ToDoubles(), Cpu<CastKernel>()(x, to).ToDoubles())
          << dt << "->" << DTypeName(to);
    }
    ExpectClose(Gpu<UnaryKernel>()(OpId::kGeluTanh, xg), Cpu<UnaryKernel>()(OpId::kGeluTanh, x),
                Tol(d), "unary " + dt);
    ExpectClose(Gpu<UnaryBackwardKernel>()(OpId::kGeluTanh, xg, yg),
                Cpu<UnaryBackwardKernel>()(OpId::kGeluTanh, x, y), Tol(d), "unary backward " + dt);
    ExpectClose(Gpu<BinaryKernel>()(OpId::kMul, xg, yg, DType::kF32),
                Cpu<BinaryKernel>()(OpId::kMul, x, y, DType::kF32), Tol(DType::kF32),
                "binary " + dt);
    ExpectClose(Gpu<ScaleKernel>()(xg, 0.37, d), Cpu<ScaleKernel>()(x, 0.37, d), Tol(d),
                "scale " + dt);
    Tensor acc = x.Clone(), acc_g = OffTheGrid(x);
    Cpu<AddInPlaceKernel>()(acc, y, -0.5);
    Gpu<AddInPlaceKernel>()(acc_g, yg, -0.5);
    ExpectClose(acc_g, acc, Tol(d), "add in place " + dt);
    ExpectClose(Gpu<SoftmaxKernel>()(xg, false, d), Cpu<SoftmaxKernel>()(x, false, d), Tol(d),
                "softmax " + dt);
    const Tensor gamma = Random({64}, d, 63, 0.5, 1.5), beta = Random({64}, d, 64);
    const LayerNormResult c = Cpu<LayerNormKernel>()(x, gamma, beta, 1e-5, d);
    const LayerNormResult g = Gpu<LayerNormKernel>()(xg, G(gamma), G(beta), 1e-5, d);
    ExpectClose(g.y, c.y, Tol(d), "layer norm " + dt);
    const LayerNormGrads cg = Cpu<LayerNormBackwardKernel>()(x, gamma, c, y);
    const LayerNormGrads gg = Gpu<LayerNormBackwardKernel>()(xg, G(gamma), g, yg);
    ExpectClose(gg.dx, cg.dx, Tol(d) * 4, "layer norm dx " + dt);
    const std::vector<int32_t> labels = {3, 0, 63, 17, 40, 9};
    const CrossEntropyResult ce = Cpu<CrossEntropyKernel>()(x, labels);
    const CrossEntropyResult ge = Gpu<CrossEntropyKernel>()(xg, labels);
    ExpectClose(ge.loss, ce.loss, 1e-5, "cross entropy " + dt);
    const Tensor one = Tensor::Full({1}, DType::kF32, 1.0);
    ExpectClose(Gpu<CrossEntropyBackwardKernel>()(xg, labels, ge.row_logsumexp, G(one)),
                Cpu<CrossEntropyBackwardKernel>()(x, labels, ce.row_logsumexp, one), Tol(d),
                "cross entropy backward " + dt);
  }
}

TEST_F(CudaBackendTest, Reductions) {
  for (DType d : kLowAndF32) {
    Tensor x = Random({300, 77}, d, 8);
    for (DType out : {DType::kF32, DType::kF64}) {
      ExpectClose(Gpu<SumAllKernel>()(G(x), out), Cpu<SumAllKernel>()(x, out), 1e-6, "sum all");
    }
    ExpectClose(Gpu<SumRowsKernel>()(G(x), DType::kF32), Cpu<SumRowsKernel>()(x, DType::kF32), 1e-6,
                "sum rows");
    ExpectClose(Gpu<SumRowsKernel>()(G(x), d), Cpu<SumRowsKernel>()(x, d), Tol(d), "sum rows low");
  }
  // Deterministic: the same sum twice, bit for bit.
  Tensor big = G(Random({1 << 20}, DType::kF32, 9));
  EXPECT_EQ(Gpu<SumAllKernel>()(big, DType::kF32).Item(),
            Gpu<SumAllKernel>()(big, DType::kF32).Item());
}

TEST_F(CudaBackendTest, SoftmaxLogSoftmaxAndBackward) {
  for (DType d : kLowAndF32) {
    for (bool log : {false, true}) {
      Tensor x = Random({20, 1000}, d, 10, -8, 8);
      Tensor dy = Random({20, 1000}, d, 11);
      Tensor y_cpu = Cpu<SoftmaxKernel>()(x, log, d);
      ExpectClose(Gpu<SoftmaxKernel>()(G(x), log, d), y_cpu, Tol(d), "softmax");
      ExpectClose(Gpu<SoftmaxBackwardKernel>()(G(y_cpu), G(dy), log, d),
                  Cpu<SoftmaxBackwardKernel>()(y_cpu, dy, log, d), Tol(d) * 4, "softmax backward");
    }
  }
}

// The fused causal attention against the CPU's, forward (output and the
// rows' logsumexp) and backward, in every dtype, with and without dropout on
// the probabilities (the same mask from the same seed on both devices); and
// deterministic.
TEST_F(CudaBackendTest, CausalAttentionForwardAndBackward) {
  const int64_t B = 2, T = 70, C = 32, H = 4;
  for (const AttentionDropout drop : {AttentionDropout{}, AttentionDropout{0.3, 91}}) {
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
      Tensor qkv = Random({B * T, 3 * C}, d, 40), dy = Random({B * T, C}, d, 41);
      const AttentionResult c = Cpu<CausalAttentionKernel>()(qkv, T, H, drop);
      const AttentionResult g = Gpu<CausalAttentionKernel>()(G(qkv), T, H, drop);
      const std::string what =
          "attention " + std::string(DTypeName(d)) + " dropout " + std::to_string(drop.p);
      ExpectClose(g.y, c.y, Tol(d) * 4, what + " y");
      ExpectClose(g.lse, c.lse, d == DType::kF64 ? 1e-12 : 1e-5, what + " lse");
      const Tensor dc = Cpu<CausalAttentionBackwardKernel>()(qkv, c.y, c.lse, dy, T, H, drop);
      const Tensor dg = Gpu<CausalAttentionBackwardKernel>()(G(qkv), g.y, g.lse, G(dy), T, H, drop);
      ExpectClose(dg, dc, Tol(d) * 8, what + " dqkv");
      const Tensor again =
          Gpu<CausalAttentionBackwardKernel>()(G(qkv), g.y, g.lse, G(dy), T, H, drop);
      EXPECT_EQ(again.ToDoubles(), dg.ToDoubles()) << what << ": not deterministic";
    }
  }
}

// The tensor-core kernels (f16 and bf16, head sizes 16..64 in steps of 16),
// one set (WMMA's, the default, or mma.sync's), against the CPU's, at sizes
// that leave partial query and key tiles: 64 query rows a block, 32 or 64
// keys a step; three of the shapes with dropout on the probabilities. Their
// probabilities go into the second product rounded to the input dtype, as
// flash attention's do; the row sums and the logsumexp are the reference's,
// in f32. The backward from the output is checked too.
void CudaBackendTest::CheckTensorCoreAttention(cuda::FlashKernels kernel) {
  struct Shape {
    int64_t B, T, C, H;
    double dropout;
  };
  const cuda::FlashKernels initial = cuda::GetFlashKernels();
  cuda::SetFlashKernels(kernel);
  for (const Shape& sh :
       {Shape{2, 70, 128, 2, 0}, Shape{1, 131, 64, 2, 0.2}, Shape{1, 33, 48, 3, 0.5},
        Shape{2, 16, 64, 4, 0}, Shape{1, 45, 96, 2, 0}, Shape{1, 200, 64, 1, 0.1}}) {
    const AttentionDropout drop{sh.dropout, 1234};
    for (DType d : {DType::kF16, DType::kBF16}) {
      Tensor qkv = Random({sh.B * sh.T, 3 * sh.C}, d, 42, -2, 2);
      const AttentionResult c = Cpu<CausalAttentionKernel>()(qkv, sh.T, sh.H, drop);
      const AttentionResult g = Gpu<CausalAttentionKernel>()(G(qkv), sh.T, sh.H, drop);
      const std::string what =
          std::string(kernel == cuda::FlashKernels::kMma ? "mma.sync" : "WMMA") + " attention " +
          std::string(DTypeName(d)) + " T=" + std::to_string(sh.T) +
          " D=" + std::to_string(sh.C / sh.H) + " dropout " + std::to_string(sh.dropout);
      ExpectClose(g.y, c.y, Tol(d) * 4, what + " y");
      ExpectClose(g.lse, c.lse, 1e-5, what + " lse");
      Tensor dy = Random({sh.B * sh.T, sh.C}, d, 43);
      const Tensor dqkv =
          Gpu<CausalAttentionBackwardKernel>()(G(qkv), g.y, g.lse, G(dy), sh.T, sh.H, drop);
      ExpectClose(dqkv, Cpu<CausalAttentionBackwardKernel>()(qkv, c.y, c.lse, dy, sh.T, sh.H, drop),
                  Tol(d) * 8, what + " dqkv");
      // One writer per gradient element, sums in a fixed order: the same bits.
      const Tensor again =
          Gpu<CausalAttentionBackwardKernel>()(G(qkv), g.y, g.lse, G(dy), sh.T, sh.H, drop);
      EXPECT_EQ(again.ToDoubles(), dqkv.ToDoubles()) << what << " dqkv is not repeatable";
    }
  }
  cuda::SetFlashKernels(initial);
}

TEST_F(CudaBackendTest, TensorCoreAttentionWmmaAgainstTheCpu) {
  CheckTensorCoreAttention(cuda::FlashKernels::kWmma);
}

// Its own test (the name's "MmaSync"): build/gpu_bundle/run runs these in a
// process of their own after the rest of the suite, so that a fault in
// kernels never yet run on a GPU cannot fail the tests after them.
TEST_F(CudaBackendTest, TensorCoreAttentionMmaSyncAgainstTheCpu) {
  CheckTensorCoreAttention(cuda::FlashKernels::kMma);
}

// Generation's attention against a KV cache: a prompt of 50 rows and then
// one row at a time on the device, each step's output and the cache against
// the CPU's, which equals the whole-sequence attention's rows.
TEST_F(CudaBackendTest, CachedAttentionAgainstTheCpu) {
  const int64_t B = 2, T = 70, C = 32, H = 4, prompt = 50;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const std::string what = "cached attention " + std::string(DTypeName(d));
    Tensor kc = Tensor::Zeros({B, T, C}, d), vc = Tensor::Zeros({B, T, C}, d);
    Tensor gk = G(kc), gv = G(vc);
    for (int64_t past = 0; past < T;) {
      const int64_t n = past == 0 ? prompt : 1;
      Tensor qkv = Random({B * n, 3 * C}, d, 60 + past);
      const Tensor c = Cpu<CachedAttentionKernel>()(qkv, kc, vc, past, H);
      const Tensor g = Gpu<CachedAttentionKernel>()(G(qkv), gk, gv, past, H);
      ExpectClose(g, c, Tol(d) * 4, what + " y at " + std::to_string(past));
      past += n;
    }
    EXPECT_EQ(gk.To(Device::kCpu).ToDoubles(), kc.ToDoubles()) << what << ": k cache";
    EXPECT_EQ(gv.To(Device::kCpu).ToDoubles(), vc.ToDoubles()) << what << ": v cache";
  }
}

// The fused LM head + cross-entropy runs on the device from the device's
// kernels over row views of its tensors (Tensor::Rows): loss and gradients
// against the CPU.
TEST_F(CudaBackendTest, LmHeadCrossEntropyOnTheDevice) {
  const std::vector<int32_t> targets = {3, 0, 9, 9, 1, 4, 2, 8, 7, 5, 6};
  for (DType d : {DType::kF32, DType::kF64}) {
    Tensor x = Random({11, 16}, d, 42), w = Random({10, 16}, d, 43);
    auto run = [&](Device dev) {
      Tensor xd = x.To(dev), wd = w.To(dev);
      xd.set_requires_grad(true);
      wd.set_requires_grad(true);
      Tensor loss = ops::LmHeadCrossEntropy(xd, wd, targets, 4);
      autograd::Backward(loss);
      return std::vector<Tensor>{loss, xd.grad(), wd.grad()};
    };
    const std::vector<Tensor> c = run(Device::kCpu), g = run(Device::kCuda);
    const std::string what = "lm head " + std::string(DTypeName(d));
    ExpectClose(g[0], c[0], Tol(d) * 4, what + " loss");
    ExpectClose(g[1], c[1], Tol(d) * 8, what + " dx");
    ExpectClose(g[2], c[2], Tol(d) * 8, what + " dw");
  }
}

// The FP8 linear from the device's kernels: the casts' codes are the CPU's,
// so the amaxes match bit for bit, and the GEMMs (FP8 on tensor cores or of
// the decoded values) match to f32 rounding.
// With current scaling too (each scale from its tensor's own amax, updated
// on the device before the cast): the scales match the CPU's bit for bit.
// The FP8 GEMM kernel against the CPU's (decode, f32 GEMM): on tensor cores
// where it applies (k and n multiples of 16, not E5M2 x E5M2; cuBLASLt
// applies the scales to the f32 sum, the CPU to each decoded value: f32
// rounding apart), the decode path elsewhere.
TEST_F(CudaBackendTest, Fp8GemmsAgainstTheCpu) {
  using core::Fp8Format;
  struct Case {
    int64_t m, k, n;
    Fp8Format fa, fb;
  };
  for (const Case& cs : {Case{32, 64, 48, Fp8Format::kE4M3, Fp8Format::kE4M3},
                         Case{40, 32, 16, Fp8Format::kE5M2, Fp8Format::kE4M3},
                         Case{24, 40, 12, Fp8Format::kE4M3, Fp8Format::kE4M3},  // decode path
                         Case{16, 32, 16, Fp8Format::kE5M2, Fp8Format::kE5M2}}) {
    const std::string what = "fp8 gemm " + std::to_string(cs.m) + "x" + std::to_string(cs.k) + "x" +
                             std::to_string(cs.n) + " " + core::Fp8FormatName(cs.fa) + "/" +
                             core::Fp8FormatName(cs.fb);
    Tensor scales = Tensor::FromVector({40.0f, 20.0f}, {2}, DType::kF32);
    Tensor invs = Tensor::FromVector({1 / 40.0f, 1 / 20.0f}, {2}, DType::kF32);
    Tensor history = Tensor::Zeros({1, 2}, DType::kF32);
    Tensor a = Cpu<Fp8CastKernel>()(Random({cs.m, cs.k}, DType::kF32, 70, -3, 3), cs.fa, scales,
                                    history, 0, Tensor());
    Tensor b = Cpu<Fp8CastKernel>()(Random({cs.n, cs.k}, DType::kF32, 71, -3, 3), cs.fb, scales,
                                    history, 1, Tensor());
    Tensor bias = Random({cs.n}, DType::kF32, 72);
    for (DType out : {DType::kF32, DType::kBF16}) {
      for (bool with_bias : {false, true}) {
        const Tensor bb = with_bias ? bias : Tensor();
        const Tensor want = Cpu<Fp8MatmulKernel>()(a, cs.fa, b, cs.fb, invs, 0, 1, bb, out);
        const Tensor got = Gpu<Fp8MatmulKernel>()(G(a), cs.fa, G(b), cs.fb, G(invs), 0, 1,
                                                  with_bias ? G(bias) : Tensor(), out);
        ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
        ExpectClose(got, want, out == DType::kF32 ? 1e-5 : Tol(out),
                    what + (with_bias ? " bias " : " ") + std::string(DTypeName(out)));
      }
    }
  }
}

TEST_F(CudaBackendTest, Fp8LinearOnTheDevice) {
  // 40 and 12 wide: the decode path; 64 and 48: FP8 GEMMs on tensor cores in
  // the forward, dgrad and wgrad (k and n multiples of 16 in each).
  struct Shape {
    int64_t rows, in, out;
  };
  for (const Shape& sh : {Shape{24, 40, 12}, Shape{32, 64, 48}})
    for (bool current : {false, true}) {
      SCOPED_TRACE(std::string(current ? "current scaling " : "delayed scaling ") +
                   std::to_string(sh.in) + " -> " + std::to_string(sh.out));
      Tensor x = Random({sh.rows, sh.in}, DType::kF32, 44, -3, 3),
             w = Random({sh.out, sh.in}, DType::kF32, 45);
      Tensor b = Random({sh.out}, DType::kF32, 46),
             weights = Random({sh.rows, sh.out}, DType::kF32, 47);
      auto run = [&](Device dev) {
        ops::Fp8LinearScaling s;
        s.amax_history = Tensor::Zeros({current ? 1 : 4, 3}, DType::kF32, dev);
        if (current) {
          s.current = true;
          s.scaled_max = Tensor::FromVector({448.0f, 448.0f, 57344.0f}, {3}, DType::kF32).To(dev);
        }
        s.scales = Tensor::FromVector({100.0f, 300.0f, 20000.0f}, {3}, DType::kF32).To(dev);
        s.scale_invs =
            Tensor::FromVector({1 / 100.0f, 1 / 300.0f, 1 / 20000.0f}, {3}, DType::kF32).To(dev);
        Tensor xd = x.To(dev), wd = w.To(dev), bd = b.To(dev);
        for (Tensor* t : {&xd, &wd, &bd}) t->set_requires_grad(true);
        Tensor y = ops::Fp8Linear(xd, wd, bd, s);
        autograd::Backward(ops::Sum(ops::Mul(y, weights.To(dev))));
        return std::vector<Tensor>{y, xd.grad(), wd.grad(), bd.grad(), s.amax_history, s.scales};
      };
      const std::vector<Tensor> c = run(Device::kCpu), g = run(Device::kCuda);
      ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
      ExpectClose(g[0], c[0], 1e-5, "fp8 linear y");
      ExpectClose(g[1], c[1], 1e-5, "fp8 linear dx");
      ExpectClose(g[2], c[2], 1e-5, "fp8 linear dw");
      ExpectClose(g[3], c[3], 1e-5, "fp8 linear db");
      EXPECT_EQ(g[4].ToDoubles(), c[4].ToDoubles()) << "amaxes of x, w and dy";
      EXPECT_EQ(g[5].ToDoubles(), c[5].ToDoubles()) << "scales";
      EXPECT_GT(c[4].ToDoubles()[2], 0.0);  // the gradient's cast ran
      if (current) {
        EXPECT_NE(c[5].ToDoubles()[0], 100.0);  // set from x's amax
      }
    }
}

TEST_F(CudaBackendTest, LayerNormForwardAndBackward) {
  for (DType d : kLowAndF32) {
    Tensor x = Random({64, 300}, d, 12);
    Tensor gamma = Random({300}, d, 13, 0.5, 1.5), beta = Random({300}, d, 14);
    Tensor dy = Random({64, 300}, d, 15);
    LayerNormResult c = Cpu<LayerNormKernel>()(x, gamma, beta, 1e-5, d);
    LayerNormResult g = Gpu<LayerNormKernel>()(G(x), G(gamma), G(beta), 1e-5, d);
    ExpectClose(g.y, c.y, Tol(d), "layer norm y");
    ExpectClose(g.mean, c.mean, 1e-5, "layer norm mean");
    ExpectClose(g.rstd, c.rstd, 1e-4, "layer norm rstd");
    LayerNormGrads cg = Cpu<LayerNormBackwardKernel>()(x, gamma, c, dy);
    LayerNormGrads gg = Gpu<LayerNormBackwardKernel>()(G(x), G(gamma), g, G(dy));
    ExpectClose(gg.dx, cg.dx, Tol(d) * 4, "layer norm dx");
    ExpectClose(gg.dgamma, cg.dgamma, Tol(d) * 4, "layer norm dgamma");
    ExpectClose(gg.dbeta, cg.dbeta, Tol(d) * 4, "layer norm dbeta");
  }
  // An f32 norm feeding a bf16 linear (ops/layer_norm.h): y written in bf16,
  // and its bf16 gradient read as it is.
  Tensor x = Random({64, 256}, DType::kF32, 16);
  Tensor gamma = Random({256}, DType::kF32, 17, 0.5, 1.5), beta = Random({256}, DType::kF32, 18);
  Tensor dy = Random({64, 256}, DType::kBF16, 19);
  LayerNormResult c = Cpu<LayerNormKernel>()(x, gamma, beta, 1e-5, DType::kBF16);
  LayerNormResult g = Gpu<LayerNormKernel>()(G(x), G(gamma), G(beta), 1e-5, DType::kBF16);
  ExpectClose(g.y, c.y, Tol(DType::kBF16), "bf16 y of an f32 layer norm");
  LayerNormGrads cg = Cpu<LayerNormBackwardKernel>()(x, gamma, c, dy);
  LayerNormGrads gg = Gpu<LayerNormBackwardKernel>()(G(x), G(gamma), g, G(dy));
  ExpectClose(gg.dx, cg.dx, Tol(DType::kF32) * 4, "f32 dx from a bf16 dy");
  ExpectClose(gg.dgamma, cg.dgamma, Tol(DType::kF32) * 4, "dgamma from a bf16 dy");
  ExpectClose(gg.dbeta, cg.dbeta, Tol(DType::kF32) * 4, "dbeta from a bf16 dy");
}

// Every path of the CUDA LayerNorm: one warp a row with 1, 2, 4 or 8 groups
// of four columns a lane (64, 200, 300, 768: GPT-2's width, two groups of
// eight unused), and the block-a-row kernels for widths the warp kernels do
// not take (301: not a multiple of 4; 1100: over 1024) and for f64.
TEST_F(CudaBackendTest, LayerNormOnEveryPath) {
  for (int64_t cols : {64, 200, 300, 768, 301, 1100}) {
    for (DType d : {DType::kF32, DType::kBF16, DType::kF64}) {
      const std::string what = "cols " + std::to_string(cols) + " " + std::string(DTypeName(d));
      Tensor x = Random({19, cols}, d, 40, -3, 5);
      Tensor gamma = Random({cols}, d, 41, 0.5, 1.5), beta = Random({cols}, d, 42);
      Tensor dy = Random({19, cols}, d, 43);
      LayerNormResult c = Cpu<LayerNormKernel>()(x, gamma, beta, 1e-5, d);
      LayerNormResult g = Gpu<LayerNormKernel>()(G(x), G(gamma), G(beta), 1e-5, d);
      ExpectClose(g.y, c.y, Tol(d), "layer norm y, " + what);
      ExpectClose(g.mean, c.mean, 1e-5, "layer norm mean, " + what);
      ExpectClose(g.rstd, c.rstd, 1e-4, "layer norm rstd, " + what);
      LayerNormGrads cg = Cpu<LayerNormBackwardKernel>()(x, gamma, c, dy);
      LayerNormGrads gg = Gpu<LayerNormBackwardKernel>()(G(x), G(gamma), g, G(dy));
      ExpectClose(gg.dx, cg.dx, Tol(d) * 4, "layer norm dx, " + what);
      ExpectClose(gg.dgamma, cg.dgamma, Tol(d) * 4, "layer norm dgamma, " + what);
      ExpectClose(gg.dbeta, cg.dbeta, Tol(d) * 4, "layer norm dbeta, " + what);
    }
  }
}

// cuDNN's convolutions (conv.cu) against oneDNN's: every pass, several
// geometries (padding, stride, dilation per dim, groups, 1x1, no bias).
struct ConvCase {
  std::vector<int64_t> x, w;
  Conv2dGeometry g;
  bool bias;
};
std::vector<ConvCase> ConvCases() {
  std::vector<ConvCase> cases;
  ConvCase padded{{4, 16, 10, 9}, {32, 16, 3, 3}, {}, true};
  padded.g.padding[0] = padded.g.padding[1] = 1;
  cases.push_back(padded);
  ConvCase strided{{3, 4, 11, 10}, {6, 4, 5, 3}, {}, false};
  strided.g.stride[0] = 2, strided.g.stride[1] = 3;
  strided.g.padding[0] = 2;
  strided.g.dilation[1] = 2;
  cases.push_back(strided);
  ConvCase grouped{{2, 8, 6, 6}, {12, 2, 3, 3}, {}, true};
  grouped.g.groups = 4;
  grouped.g.padding[0] = grouped.g.padding[1] = 1;
  cases.push_back(grouped);
  cases.push_back({{2, 32, 5, 5}, {16, 32, 1, 1}, {}, true});
  return cases;
}

TEST_F(CudaBackendTest, Conv2dForwardAndBackward) {
  for (DType d : kLowAndF32) {
    int i = 0;
    for (const ConvCase& c : ConvCases()) {
      SCOPED_TRACE(::testing::Message() << DTypeName(d) << " conv case " << i++);
      Tensor x = Random(c.x, d, 40), w = Random(c.w, d, 41, -0.5, 0.5);
      Tensor b = c.bias ? Random({c.w[0]}, d, 42) : Tensor();
      Tensor y = Cpu<Conv2dKernel>()(x, w, b, c.g, d);
      Tensor gy = Gpu<Conv2dKernel>()(G(x), G(w), c.bias ? G(b) : Tensor(), c.g, d);
      // The GPU adds the bias after rounding the convolution: a second rounding.
      ExpectClose(gy, y, Tol(d) * 2, "conv2d y");
      Tensor dy = Random(y.shape(), d, 43);
      ExpectClose(Gpu<Conv2dBackwardDataKernel>()(G(dy), G(w), c.x, c.g, d),
                  Cpu<Conv2dBackwardDataKernel>()(dy, w, c.x, c.g, d), Tol(d) * 2, "conv2d dx");
      Conv2dWeightGrads cw = Cpu<Conv2dBackwardWeightKernel>()(x, dy, c.w, c.bias, c.g, d);
      Conv2dWeightGrads gw = Gpu<Conv2dBackwardWeightKernel>()(G(x), G(dy), c.w, c.bias, c.g, d);
      ExpectClose(gw.dw, cw.dw, Tol(d) * 2, "conv2d dw");
      ASSERT_EQ(gw.db.defined(), c.bias);
      if (c.bias) {
        ExpectClose(gw.db, cw.db, Tol(d), "conv2d db");
      }
    }
  }
}

// The backward passes use deterministic algorithms only, so the same inputs
// give the same bits (the same seed, the same losses).
TEST_F(CudaBackendTest, Conv2dBackwardIsBitwiseRepeatable) {
  // f32, where a different order of the sums shows in the last bits.
  const ConvCase c = ConvCases()[0];
  Tensor x = G(Random(c.x, DType::kF32, 44)), w = G(Random(c.w, DType::kF32, 45));
  Tensor y = Gpu<Conv2dKernel>()(x, w, Tensor(), c.g, DType::kF32);
  Tensor dy = G(Random(y.shape(), DType::kF32, 46));
  std::vector<double> dx[2], dw[2];
  for (int r = 0; r < 2; ++r) {
    dx[r] = Gpu<Conv2dBackwardDataKernel>()(dy, w, c.x, c.g, DType::kF32).ToDoubles();
    dw[r] = Gpu<Conv2dBackwardWeightKernel>()(x, dy, c.w, false, c.g, DType::kF32).dw.ToDoubles();
  }
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
}

TEST_F(CudaBackendTest, Pool2dForwardAndBackward) {
  std::vector<Pool2dGeometry> geometries;
  Pool2dGeometry max;
  max.op = OpId::kMaxPool2d;
  max.kernel[0] = max.kernel[1] = 3;
  max.stride[0] = 2, max.stride[1] = 1;
  max.padding[0] = max.padding[1] = 1;
  max.dilation[1] = 2;
  geometries.push_back(max);
  Pool2dGeometry avg;
  avg.op = OpId::kAvgPool2d;
  avg.kernel[0] = avg.kernel[1] = avg.stride[0] = avg.stride[1] = 2;
  avg.padding[0] = avg.padding[1] = 1;
  geometries.push_back(avg);
  avg.count_include_pad = false;
  geometries.push_back(avg);
  // Unpadded windows (the CPU's direct path): 2x2 max, 3x3 stride-2 average.
  Pool2dGeometry max2;
  max2.op = OpId::kMaxPool2d;
  max2.kernel[0] = max2.kernel[1] = max2.stride[0] = max2.stride[1] = 2;
  geometries.push_back(max2);
  Pool2dGeometry avg3;
  avg3.op = OpId::kAvgPool2d;
  avg3.kernel[0] = avg3.kernel[1] = 3;
  avg3.stride[0] = avg3.stride[1] = 2;
  geometries.push_back(avg3);
  Pool2dGeometry adaptive;
  adaptive.op = OpId::kAdaptiveAvgPool2d;
  adaptive.output[0] = 3, adaptive.output[1] = 4;
  geometries.push_back(adaptive);
  for (DType d : kLowAndF32) {
    for (const Pool2dGeometry& g : geometries) {
      SCOPED_TRACE(::testing::Message() << DTypeName(d) << " " << ops::OpName(g.op));
      Tensor x = Random({3, 5, 9, 7}, d, 47);
      Tensor y = Cpu<Pool2dKernel>()(x, g, d);
      ExpectClose(Gpu<Pool2dKernel>()(G(x), g, d), y, Tol(d), "pool y");
      Tensor dy = Random(y.shape(), d, 48);
      ExpectClose(Gpu<Pool2dBackwardKernel>()(G(x), G(dy), g),
                  Cpu<Pool2dBackwardKernel>()(x, dy, g), Tol(d), "pool dx");
    }
  }
}

TEST_F(CudaBackendTest, BatchNormTrainingAndEval) {
  // Out in f32, and in the activation's dtype (what autocast asks of batch
  // norm: f32 arithmetic on bf16/f16 activations, written back in their
  // dtype, as PyTorch's).
  for (DType d : kLowAndF32)
    for (DType out : {DType::kF32, d})
      for (bool training : {true, false}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(d) << " out " << DTypeName(out)
                                          << (training ? " training" : " eval"));
        Tensor x = Random({6, 5, 7, 3}, d, 49, -1, 3);
        // Norm parameters in f32 (keep_norms_fp32) and running statistics in f32.
        Tensor gamma = Random({5}, DType::kF32, 50, 0.5, 1.5), beta = Random({5}, DType::kF32, 51);
        Tensor rm = Random({5}, DType::kF32, 52), rv = Random({5}, DType::kF32, 53, 0.5, 2);
        Tensor grm = G(rm), grv = G(rv);
        BatchNormResult c =
            Cpu<BatchNormKernel>()(x, gamma, beta, rm, rv, training, 0.1, 1e-5, out);
        BatchNormResult g =
            Gpu<BatchNormKernel>()(G(x), G(gamma), G(beta), grm, grv, training, 0.1, 1e-5, out);
        EXPECT_EQ(g.y.dtype(), out);
        ExpectClose(g.y, c.y, out == DType::kF32 ? 2e-5 : Tol(out), "batch norm y");
        ExpectClose(g.mean, c.mean, 1e-6, "batch norm mean");
        ExpectClose(g.rstd, c.rstd, 1e-6, "batch norm rstd");
        ExpectClose(grm, rm, 1e-6, "running mean");
        ExpectClose(grv, rv, 1e-6, "running var");
        Tensor dy = Random(x.shape(), d, 54);
        BatchNormGrads cg = Cpu<BatchNormBackwardKernel>()(x, gamma, c.mean, c.rstd, dy, training);
        BatchNormGrads gg =
            Gpu<BatchNormBackwardKernel>()(G(x), G(gamma), g.mean, g.rstd, G(dy), training);
        ExpectClose(gg.dx, cg.dx, Tol(d) * 2, "batch norm dx");
        ExpectClose(gg.dgamma, cg.dgamma, 1e-5, "batch norm dgamma");
        ExpectClose(gg.dbeta, cg.dbeta, 1e-5, "batch norm dbeta");
      }
}

TEST_F(CudaBackendTest, FusedSoftmaxCrossEntropy) {
  std::vector<int32_t> labels;
  for (int i = 0; i < 96; ++i) labels.push_back((i * 37) % 1000);
  for (DType d : kLowAndF32) {
    Tensor logits = Random({96, 1000}, d, 16, -10, 10);
    const CrossEntropyResult c = Cpu<CrossEntropyKernel>()(logits, labels);
    const CrossEntropyResult g = Gpu<CrossEntropyKernel>()(G(logits), labels);
    ExpectClose(g.loss, c.loss, 1e-5, "cross entropy loss");
    ExpectClose(g.row_logsumexp, c.row_logsumexp, 1e-5, "row logsumexp");
    // The upstream gradient where the logits are: read on the device there.
    const Tensor half = Tensor::Full({1}, DType::kF32, 0.5);
    ExpectClose(Gpu<CrossEntropyBackwardKernel>()(G(logits), labels, g.row_logsumexp, G(half)),
                Cpu<CrossEntropyBackwardKernel>()(logits, labels, c.row_logsumexp, half), Tol(d),
                "cross entropy backward");
  }
}

// The cross-entropy's one-pass rows (16-byte loads where the width is a
// multiple of 8, else one value at a time) and its backward by column
// groups, with an LM head's padded vocabulary (-inf logits past the real
// one) and a row with a NaN logit (NaN loss, as the CPU).
TEST_F(CudaBackendTest, CrossEntropyOverWideRowsPaddingAndNan) {
  for (int64_t cols : {4104, 4101}) {
    std::vector<int32_t> labels;
    for (int i = 0; i < 5; ++i) labels.push_back((i * 997) % 4000);
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::string what = "cols " + std::to_string(cols) + " " + std::string(DTypeName(d));
      std::vector<double> v = Random({5, cols}, DType::kF64, 44, -8, 8).ToDoubles();
      for (int64_t r = 0; r < 5; ++r) {
        for (int64_t c = 4000; c < cols; ++c) v[r * cols + c] = -INFINITY;  // padding
      }
      const Tensor logits = Tensor::FromDoubles(v, {5, cols}, d);
      const CrossEntropyResult c = Cpu<CrossEntropyKernel>()(logits, labels);
      const CrossEntropyResult g = Gpu<CrossEntropyKernel>()(G(logits), labels);
      ExpectClose(g.loss, c.loss, 1e-5, "loss, " + what);
      ExpectClose(g.row_logsumexp, c.row_logsumexp, 1e-5, "row logsumexp, " + what);
      const Tensor half = Tensor::Full({1}, DType::kF32, 0.5);
      const Tensor dx =
          Gpu<CrossEntropyBackwardKernel>()(G(logits), labels, g.row_logsumexp, G(half));
      ExpectClose(dx, Cpu<CrossEntropyBackwardKernel>()(logits, labels, c.row_logsumexp, half),
                  Tol(d), "backward, " + what);
      const std::vector<double> dxv = dx.ToDoubles();
      EXPECT_EQ(dxv[cols - 1], 0.0) << "padding's gradient, " << what;
      v[2 * cols + 17] = NAN;
      const Tensor with_nan = Tensor::FromDoubles(v, {5, cols}, d);
      const CrossEntropyResult n = Gpu<CrossEntropyKernel>()(G(with_nan), labels);
      const std::vector<double> lse = n.row_logsumexp.ToDoubles();
      EXPECT_TRUE(std::isnan(lse[2])) << what;
      EXPECT_FALSE(std::isnan(lse[1]) || std::isnan(lse[3])) << what;
      EXPECT_TRUE(std::isnan(n.loss.ToDoubles()[0])) << what;
    }
  }
}

TEST_F(CudaBackendTest, EmbeddingAndDropout) {
  const std::vector<int32_t> ids = {3, 0, 7, 3, 3, 9, 1};
  for (DType d : kLowAndF32) {
    Tensor table = Random({10, 24}, d, 17);
    EXPECT_EQ(Gpu<EmbeddingKernel>()(G(table), ids).ToDoubles(),
              Cpu<EmbeddingKernel>()(table, ids).ToDoubles());
    Tensor dy = Random({7, 24}, d, 18);
    ExpectClose(Gpu<EmbeddingBackwardKernel>()(G(dy), ids, 10),
                Cpu<EmbeddingBackwardKernel>()(dy, ids, 10), Tol(d), "embedding backward");
    Tensor x = Random({50, 50}, d, 19);
    // The same counter-based mask as the CPU, so the same elements survive.
    ExpectClose(Kernel<DropoutKernel>(Device::kCuda)(G(x), 0.3, 1234),
                Kernel<DropoutKernel>(Device::kCpu)(x, 0.3, 1234), Tol(d), "dropout");
  }
}

TEST_F(CudaBackendTest, MatmulEveryTransposeAndDtype) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int64_t m = 37, n = 53, k = 61;
        Tensor a = Random(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, d, 20);
        Tensor b = Random(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, d, 21);
        for (DType out : {d, DType::kF32}) {
          // Sums of k products: the tolerance grows with sqrt(k).
          ExpectClose(
              Gpu<MatmulKernel>()(G(a), G(b), ta, tb, out), Cpu<MatmulKernel>()(a, b, ta, tb, out),
              Tol(out) * 8,
              "matmul " + std::string(DTypeName(d)) + (ta ? " ta" : "") + (tb ? " tb" : ""));
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, F32MatmulKeepsTf32OffUnlessAllowed) {
  const int64_t m = 256, n = 256, k = 2048;
  Tensor a = Random({m, k}, DType::kF32, 22), b = Random({k, n}, DType::kF32, 23);
  Tensor ref = Cpu<MatmulKernel>()(Cpu<CastKernel>()(a, DType::kF64),
                                   Cpu<CastKernel>()(b, DType::kF64), false, false, DType::kF64);
  // Norm-wise: the worst error over the largest result. An f32 FMA chain of
  // k = 2048 terms may lose ~1e-4 on an element near zero (the CPU emulator
  // showed that an element-wise bound of 1e-5 fails f32 itself); inputs
  // rounded to TF32's 10-bit mantissa lose about 100x more.
  auto norm_rel_error = [&](const Tensor& got) {
    std::vector<double> g = got.ToDoubles(), r = ref.ToDoubles();
    double worst = 0, largest = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      worst = std::max(worst, std::fabs(g[i] - r[i]));
      largest = std::max(largest, std::fabs(r[i]));
    }
    return worst / largest;
  };
  gpu_->SetMatmulOptions(false);
  const double fp32 = norm_rel_error(Gpu<MatmulKernel>()(G(a), G(b), false, false, DType::kF32));
  gpu_->SetMatmulOptions(true);
  const double tf32 = norm_rel_error(Gpu<MatmulKernel>()(G(a), G(b), false, false, DType::kF32));
  gpu_->SetMatmulOptions(false);
  EXPECT_LT(fp32, 2e-5) << "TF32 must be off by default";
  EXPECT_GT(tf32, 10 * fp32) << "allow_tf32 should switch to TF32 tensor cores";
}

TEST_F(CudaBackendTest, LinearFusesTheBiasIntoTheGemm) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    Tensor x = Random({64, 96}, d, 24), w = Random({80, 96}, d, 25), b = Random({80}, d, 26);
    // One rounding (epilogue) against the CPU's two: within one more ulp.
    ExpectClose(Gpu<LinearKernel>()(G(x), G(w), G(b), d), Cpu<LinearKernel>()(x, w, b, d),
                Tol(d) * 8, "linear " + std::string(DTypeName(d)));
  }
}

// cuBLASLt's GELU epilogues compute the tanh approximation of GELU.
double GeluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double GeluTanhGrad(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

TEST_F(CudaBackendTest, GemmEpiloguesGeluAuxBiasDGeluAndBiasGradient) {
  const int64_t m = 64, n = 128, k = 96;  // n: multiple of 8 for the aux leading dimension
  Tensor a = Random({m, k}, DType::kBF16, 27, -1, 1), b = Random({k, n}, DType::kBF16, 28, -1, 1);
  Tensor bias = Random({n}, DType::kBF16, 29);
  Tensor prod = Cpu<MatmulKernel>()(Cpu<CastKernel>()(a, DType::kF64),
                                    Cpu<CastKernel>()(b, DType::kF64), false, false, DType::kF64);
  const std::vector<double> p = prod.ToDoubles(), bv = bias.ToDoubles();
  Tensor ga = G(a), gb = G(b), gbias = G(bias);
  Tensor c = gpu_->Allocate({m, n}, DType::kBF16, false);
  Tensor aux = gpu_->Allocate({m, n}, DType::kBF16, false);
  cuda::GemmArgs args;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = ga.raw();
  args.b = gb.raw();
  args.c = c.raw();
  args.ab_dtype = args.c_dtype = static_cast<int>(DType::kBF16);
  args.epilogue = cuda::Epilogue::kGeluAuxBias;
  args.bias = gbias.raw();
  args.aux = aux.raw();
  cuda::GemmRunner& runner = cuda::GemmRunner::ForThisThread();
  ASSERT_EQ(runner.Run(args, cuda::CudaStreamForThisThread()), "");
  const std::vector<double> out = c.ToDoubles(), pre = aux.ToDoubles();
  for (int64_t i = 0; i < m * n; ++i) {
    const double want_pre = p[i] + bv[i % n];
    ASSERT_NEAR(pre[i], want_pre, 2e-2 * std::max(1.0, std::fabs(want_pre))) << i;
    ASSERT_NEAR(out[i], GeluTanh(want_pre), 2e-2 * std::max(1.0, std::fabs(want_pre))) << i;
  }
  // Backward: C = (A B) * gelu'(aux), and the bias gradient = column sums of C.
  Tensor dbias = gpu_->Allocate({n}, DType::kBF16, false);
  args.epilogue = cuda::Epilogue::kDGeluBgrad;
  args.bias = nullptr;
  args.bias_grad = dbias.raw();
  const int plans_before = runner.cached_plans();
  ASSERT_EQ(runner.Run(args, cuda::CudaStreamForThisThread()), "");
  const std::vector<double> dout = c.ToDoubles(), db = dbias.ToDoubles();
  for (int64_t i = 0; i < m * n; ++i) {
    const double want = p[i] * GeluTanhGrad(pre[i]);
    ASSERT_NEAR(dout[i], want, 2e-2 * std::max(1.0, std::fabs(want))) << i;
  }
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t i = 0; i < m; ++i) s += p[i * n + j] * GeluTanhGrad(pre[i * n + j]);
    EXPECT_NEAR(db[j], s, 3e-2 * std::max(1.0, std::fabs(s))) << j;
  }
  // Plans are cached per shape: running again builds none.
  ASSERT_EQ(runner.Run(args, cuda::CudaStreamForThisThread()), "");
  EXPECT_EQ(runner.cached_plans(), plans_before + 1);
  args.epilogue = cuda::Epilogue::kDGelu;
  args.bias_grad = nullptr;
  ASSERT_EQ(runner.Run(args, cuda::CudaStreamForThisThread()), "");
  const std::vector<double> dg = c.ToDoubles();
  for (int64_t i = 0; i < m * n; ++i) {
    ASSERT_NEAR(dg[i], dout[i], 1e-2 * std::max(1.0, std::fabs(dout[i]))) << i;
  }
}

// GPT-2's MLP kernels (backend/kernels/gelu_mlp.h) against the CPU's, which
// are the unfused ops: with the GELU in cuBLASLt's epilogues where the width
// is a multiple of 8 (one rounding where the CPU has two: a few more ulps),
// and unfused on the GPU too where it is not, or for f64.
TEST_F(CudaBackendTest, GeluMlpKernelsFuseTheGeluIntoTheGemms) {
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32, DType::kF64}) {
    for (int64_t n : {128, 100}) {
      const std::string what = std::string(DTypeName(d)) + " n=" + std::to_string(n);
      Tensor x = Random({64, 96}, d, 40, -1, 1), w = Random({n, 96}, d, 41, -0.2, 0.2);
      Tensor b = Random({n}, d, 42, -0.5, 0.5);
      const backend::LinearGeluTanhResult got = Gpu<LinearGeluTanhKernel>()(G(x), G(w), G(b), d);
      const backend::LinearGeluTanhResult want = Cpu<LinearGeluTanhKernel>()(x, w, b, d);
      ExpectClose(got.pre, want.pre, Tol(d) * 8, "pre " + what);
      ExpectClose(got.y, want.y, Tol(d) * 8, "y " + what);
      // Backward through c_proj [96, n] into the GELU's input.
      Tensor dy = Random({64, 96}, d, 43, -1, 1), w2 = Random({96, n}, d, 44, -0.2, 0.2);
      for (bool bias_grad : {true, false}) {
        const backend::DGeluTanhResult dg =
            Gpu<MatmulDGeluTanhKernel>()(G(dy), G(w2), got.pre, bias_grad, d);
        const backend::DGeluTanhResult dc =
            Cpu<MatmulDGeluTanhKernel>()(dy, w2, want.pre, bias_grad, d);
        ExpectClose(dg.dpre, dc.dpre, Tol(d) * 8, "dpre " + what);
        ASSERT_EQ(dg.dbias.defined(), bias_grad) << what;
        if (!bias_grad) continue;
        // The bias gradient: the column sums of dpre, within the rounding of
        // the terms (the epilogue sums them before rounding them).
        const std::vector<double> dp = dg.dpre.ToDoubles(), db = dg.dbias.ToDoubles();
        ASSERT_EQ(dg.dbias.dtype(), d) << what;
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0, size = 0;
          for (int64_t i = 0; i < 64; ++i) {
            sum += dp[i * n + j];
            size += std::fabs(dp[i * n + j]);
          }
          ASSERT_NEAR(db[j], sum, Tol(d) * std::max(1.0, size)) << what << " column " << j;
        }
      }
    }
  }
}

// `count` gradients of 1 + 37 i values, but for two of 600,001 and 500,003
// (more blocks between them than a launch takes, so the kernels' blocks are
// shared out by size), with an inf in the middle of tensor bad_index.
std::vector<Tensor> ManyGradients(int count, DType d, int bad_index) {
  std::vector<Tensor> grads;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i == 7 ? 600001 : i == 30 ? 500003 : 1 + 37 * i;
    Tensor g = Random({n}, d, 100 + i, -1000, 1000);
    if (i == bad_index) {
      std::vector<double> v = g.ToDoubles();
      v[v.size() / 2] = INFINITY;
      g = Tensor::FromDoubles(v, g.shape(), d);
    }
    grads.push_back(g);
  }
  return grads;
}

TEST_F(CudaBackendTest, MultiTensorUnscaleSetsTheDeviceFlag) {
  // 60 tensors: more than one launch's worth. A scale of 1 (no loss
  // scaling) is the check alone, which writes nothing back.
  for (int bad : {-1, 0, 50}) {
    for (DType d : {DType::kF32, DType::kF16}) {
      for (double scale : {1024.0, 1.0}) {
        std::vector<Tensor> cpu_grads = ManyGradients(60, d, bad);
        std::vector<Tensor> gpu_grads;
        for (const Tensor& g : cpu_grads) gpu_grads.push_back(G(g));
        DeviceAmpState amp{Tensor::Full({1}, DType::kF32, scale, Device::kCuda),
                           Tensor::Zeros({1}, DType::kF32, Device::kCuda),
                           Tensor::Zeros({1}, DType::kF32, Device::kCuda)};
        gpu_->UnscaleAndCheckOnDevice(gpu_grads, amp);
        NonFiniteCheck want = cpu().UnscaleAndCheck(cpu_grads, static_cast<float>(1.0 / scale));
        EXPECT_EQ(gpu_->ReadScalars({amp.found_inf})[0], want.found_inf ? 1.0 : 0.0) << bad;
        for (size_t i = 0; i < cpu_grads.size(); ++i) {
          EXPECT_EQ(gpu_grads[i].ToDoubles(), cpu_grads[i].ToDoubles())
              << "tensor " << i << ", scale " << scale;
        }
      }
      // The host-reporting variant names the first bad tensor.
      std::vector<Tensor> again;
      for (const Tensor& g : ManyGradients(60, d, bad)) again.push_back(G(g));
      NonFiniteCheck check = gpu_->UnscaleAndCheck(again, 0.5f);
      EXPECT_EQ(check.found_inf, bad >= 0);
      if (bad >= 0) {
        EXPECT_EQ(check.first_index, bad);
      }
    }
  }
}

TEST_F(CudaBackendTest, ScaleUpdateOnDeviceReplaysPyTorchsRule) {
  DeviceAmpState amp{Tensor::Full({1}, DType::kF32, 65536.0, Device::kCuda),
                     Tensor::Zeros({1}, DType::kF32, Device::kCuda),
                     Tensor::Zeros({1}, DType::kF32, Device::kCuda)};
  ScaleUpdateOptions o;
  o.growth_interval = 3;
  GradScalerState host{65536.0, 0};
  std::mt19937 gen(7);
  for (int step = 0; step < 200; ++step) {
    const bool inf = gen() % 4 == 0;
    gpu_->Fill(amp.found_inf, inf ? 1.0 : 0.0);
    gpu_->UpdateScaleOnDevice(amp, o);
    host = AmpUpdateScale(host, inf, o.growth_factor, o.backoff_factor, o.growth_interval);
    const std::vector<double> v = gpu_->ReadScalars({amp.scale, amp.growth_tracker});
    ASSERT_EQ(v[0], static_cast<float>(host.scale)) << "step " << step;
    ASSERT_EQ(v[1], host.growth_tracker) << "step " << step;
  }
}

TEST_F(CudaBackendTest, SumOfSquaresAcrossManyTensors) {
  std::vector<Tensor> cpu_t = ManyGradients(60, DType::kBF16, -1), gpu_t;
  for (const Tensor& t : cpu_t) gpu_t.push_back(G(t));
  const double want = cpu().SumOfSquares(cpu_t);
  EXPECT_NEAR(gpu_->SumOfSquares(gpu_t), want, 1e-9 * want);
  Tensor out = Tensor::Zeros({1}, DType::kF32, Device::kCuda);
  gpu_->SumOfSquaresOnDevice(gpu_t, out);
  EXPECT_NEAR(gpu_->ReadScalars({out})[0], want, 1e-6 * want);
}

// Clipping by the global norm with the norm left on the device: the same
// factor, bit for bit, as the host rule (backend::ClipFactor, what the CPU's
// reference ClipOnDevice reads back and applies), nothing touched when the
// norm is at most max_norm or not finite, and found_inf left alone.
TEST_F(CudaBackendTest, ClippingOnTheDeviceAppliesTheHostsFactor) {
  const std::vector<Tensor> cpu_t = ManyGradients(60, DType::kF32, -1);
  const double sum = cpu().SumOfSquares(cpu_t);
  for (const double sum_sq : {sum, 4.0, std::nan(""), static_cast<double>(INFINITY)}) {
    for (const double max_norm : {1.0, 2.0, 1e30}) {
      const std::string what =
          "sum of squares " + std::to_string(sum_sq) + ", max_norm " + std::to_string(max_norm);
      std::vector<Tensor> gpu_t;
      for (const Tensor& t : cpu_t) gpu_t.push_back(G(t));
      const Tensor sq = Tensor::Full({1}, DType::kF32, sum_sq, Device::kCuda);
      const Tensor found = Tensor::Zeros({1}, DType::kF32, Device::kCuda);
      gpu_->ClipOnDevice(gpu_t, sq, max_norm, found);
      const float factor = backend::ClipFactor(static_cast<float>(sum_sq), max_norm);
      if (sum_sq == 4.0 && max_norm == 1.0) {
        EXPECT_NE(factor, 1.0f) << what;
      }
      if (max_norm == 1e30 || !std::isfinite(sum_sq)) {
        EXPECT_EQ(factor, 1.0f) << what;
      }
      for (size_t i = 0; i < cpu_t.size(); ++i) {
        std::vector<double> want = cpu_t[i].ToDoubles();
        for (double& v : want) v = static_cast<float>(static_cast<float>(v) * factor);
        ASSERT_EQ(gpu_t[i].ToDoubles(), want) << what << ", tensor " << i;
      }
      EXPECT_EQ(gpu_->ReadScalars({found})[0], 0.0) << what;
    }
  }
}

TEST_F(CudaBackendTest, FusedOptimizerStepsMatchTheReferenceAndSkipOnTheFlag) {
  for (bool adamw : {false, true}) {
    for (bool skip : {false, true}) {
      Tensor p = Random({4097}, DType::kF32, 30), g = Random({4097}, DType::kF32, 31);
      Tensor m = Random({4097}, DType::kF32, 32, 0, 0.1),
             v = Random({4097}, DType::kF32, 33, 0, 0.1);
      Tensor gp = G(p), gm = G(m), gv = G(v);
      Tensor copy = Tensor::Zeros({4097}, DType::kBF16, Device::kCuda);
      Backend::FusedStepArgs args;
      args.found_inf = Tensor::Full({1}, DType::kF32, skip ? 1.0 : 0.0, Device::kCuda);
      args.model_copy = copy;
      args.step = Tensor::Full({1}, DType::kF32, 4.0, Device::kCuda);  // 4 applied before
      const std::vector<double> p0 = p.ToDoubles(), m0 = m.ToDoubles();
      if (adamw) {
        Backend::AdamWHyper h;
        h.lr = 1e-3f;
        h.weight_decay = 0.01f;
        gpu_->AdamWStepFused(gp, G(g), gm, gv, h, args);
        h.step = 5;
        if (!skip) cpu().AdamWStep(p, g, m, v, h);
      } else {
        Backend::SgdHyper h;
        h.lr = 0.1f;
        h.momentum = 0.9f;
        h.weight_decay = 1e-4f;
        gpu_->SgdStepFused(gp, G(g), gm, h, false, args);
        if (!skip) cpu().SgdStep(p, g, m, h, false);
      }
      const std::string what = std::string(adamw ? "adamw" : "sgd") + (skip ? " skipped" : "");
      if (skip) {
        EXPECT_EQ(gp.ToDoubles(), p0) << what;  // untouched, bit for bit
        EXPECT_EQ(gm.ToDoubles(), m0) << what;
        EXPECT_EQ(copy.ToDoubles(), std::vector<double>(4097, 0.0)) << what;
      } else {
        ExpectClose(gp, p, 1e-6, what);
        ExpectClose(gm, m, 1e-6, what + " state");
        ExpectClose(copy, Cpu<CastKernel>()(p, DType::kBF16), Tol(DType::kBF16),
                    what + " model copy");
      }
    }
  }
}

// The AdamW step over a list of parameters (one launch for up to 32 of them,
// blocks shared out by size) gives every parameter, state and model copy the
// bits a fused step per parameter gives: 45 parameters (two launches) of
// sizes 1 to 600,001, some without weight decay, with f32 or bf16 gradients
// and with or without a bf16 model copy. A set skip flag changes nothing.
TEST_F(CudaBackendTest, AdamWOverAListMatchesAStepPerParameter) {
  struct Param {
    Tensor p, g, m, v, copy;
    bool decay;
  };
  auto make = [&](int count) {
    std::vector<Param> params;
    for (int i = 0; i < count; ++i) {
      const int64_t n = i == 3 ? 600001 : i == 40 ? 65536 : 1 + 37 * i;
      const uint32_t seed = 200 + 4 * i;
      params.push_back({G(Random({n}, DType::kF32, seed)),
                        G(Random({n}, i % 3 == 0 ? DType::kBF16 : DType::kF32, seed + 1)),
                        G(Random({n}, DType::kF32, seed + 2, -0.1, 0.1)),
                        G(Random({n}, DType::kF32, seed + 3, 0, 0.1)),
                        i % 4 == 1 ? Tensor() : Tensor::Zeros({n}, DType::kBF16, Device::kCuda),
                        i % 5 != 2});
    }
    return params;
  };
  Backend::AdamWHyper h;
  h.lr = 3e-3f;
  h.weight_decay = 0.1f;
  for (const bool skip : {false, true}) {
    const Tensor found = Tensor::Full({1}, DType::kF32, skip ? 1.0 : 0.0, Device::kCuda);
    const Tensor step = Tensor::Full({1}, DType::kF32, 6.0, Device::kCuda);
    std::vector<Param> listed = make(45), each = make(45);
    std::vector<Backend::AdamWParam> list;
    for (const Param& q : listed) list.push_back({q.p, q.g, q.m, q.v, q.copy, q.decay});
    gpu_->AdamWStepFusedList(list, h, found, step);
    for (const Param& q : each) {
      Backend::AdamWHyper ph = h;
      if (!q.decay) ph.weight_decay = 0;
      gpu_->AdamWStepFused(q.p, q.g, q.m, q.v, ph, {skip ? found : Tensor(), q.copy, step});
    }
    const std::vector<Param> before = make(45);
    for (size_t i = 0; i < listed.size(); ++i) {
      const std::string what = "parameter " + std::to_string(i) + (skip ? ", skipped" : "");
      const Param& a = listed[i];
      const Param& b = skip ? before[i] : each[i];
      ASSERT_EQ(a.p.ToDoubles(), b.p.ToDoubles()) << what;
      ASSERT_EQ(a.m.ToDoubles(), b.m.ToDoubles()) << what;
      ASSERT_EQ(a.v.ToDoubles(), b.v.ToDoubles()) << what;
      if (a.copy.defined()) {
        ASSERT_EQ(a.copy.ToDoubles(), b.copy.ToDoubles()) << what;
      }
      if (!skip) {
        ASSERT_NE(a.p.ToDoubles(), before[i].p.ToDoubles()) << what;
      }
    }
  }
}

// The 8-bit AdamW and SGD steps over a list (two launches for 37 tensors)
// leave every tensor's weights, codes, absmax values and model copy bit for
// bit as a launch per tensor does, with decay only where asked, bf16 and f32
// gradients, partial last blocks and a tensor large enough to share many
// blocks; a set flag changes nothing.
TEST_F(CudaBackendTest, EightBitStepsOverAListMatchAStepPerTensor) {
  using backend::AdamW8bitParam;
  using backend::AdamW8bitStepKernel;
  using backend::AdamW8bitStepListKernel;
  using backend::QuantBlocks;
  using backend::Sgd8bitParam;
  using backend::Sgd8bitStepKernel;
  using backend::Sgd8bitStepListKernel;
  auto codes = [](int64_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<double> v(n);
    for (double& c : v) c = static_cast<double>(gen() % 256);
    return G(Tensor::FromDoubles(v, {n}, DType::kU8));
  };
  // Each tensor's weights, gradient, two states (codes, absmax) and copy.
  auto make = [&](int count) {
    std::vector<AdamW8bitParam> params;
    for (int i = 0; i < count; ++i) {
      const int64_t n = i == 3 ? 300001 : i == 20 ? 65536 : 4096 + 37 * i;
      const uint32_t seed = 300 + 8 * i;
      params.push_back(
          {G(Random({n}, DType::kF32, seed)),
           G(Random({n}, i % 3 == 0 ? DType::kBF16 : DType::kF32, seed + 1)), codes(n, seed + 2),
           G(Random({QuantBlocks(n)}, DType::kF32, seed + 3, 0.01, 0.1)), codes(n, seed + 4),
           G(Random({QuantBlocks(n)}, DType::kF32, seed + 5, 0.01, 0.1)),
           i % 4 == 1 ? Tensor() : Tensor::Zeros({n}, DType::kBF16, Device::kCuda), i % 5 != 2});
    }
    return params;
  };
  auto sgd = [](const std::vector<AdamW8bitParam>& params) {
    std::vector<Sgd8bitParam> out;
    for (const AdamW8bitParam& q : params) {
      out.push_back({q.param, q.grad, q.m_codes, q.m_absmax, q.model_copy, q.weight_decay});
    }
    return out;
  };
  Backend::AdamWHyper ah;
  ah.lr = 3e-3f;
  ah.weight_decay = 0.1f;
  Backend::SgdHyper sh;
  sh.lr = 0.05f;
  sh.momentum = 0.9f;
  sh.weight_decay = 1e-3f;
  for (const bool adamw : {true, false}) {
    for (const bool skip : {false, true}) {
      const Tensor found = Tensor::Full({1}, DType::kF32, skip ? 1.0 : 0.0, Device::kCuda);
      const Tensor step = Tensor::Full({1}, DType::kF32, 6.0, Device::kCuda);
      const std::vector<AdamW8bitParam> listed = make(37), each = make(37), before = make(37);
      if (adamw) {
        Gpu<AdamW8bitStepListKernel>()(listed, ah, found, step);
      } else {
        Gpu<Sgd8bitStepListKernel>()(sgd(listed), sh, false, found);
      }
      for (const AdamW8bitParam& q : each) {
        if (adamw) {
          Backend::AdamWHyper h = ah;
          if (!q.weight_decay) h.weight_decay = 0;
          Gpu<AdamW8bitStepKernel>()(q.param, q.grad, q.m_codes, q.m_absmax, q.v_codes, q.v_absmax,
                                     h, {found, q.model_copy, step});
        } else {
          Backend::SgdHyper h = sh;
          if (!q.weight_decay) h.weight_decay = 0;
          Gpu<Sgd8bitStepKernel>()(q.param, q.grad, q.m_codes, q.m_absmax, h, false,
                                   {found, q.model_copy, Tensor()});
        }
      }
      ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
      for (size_t i = 0; i < listed.size(); ++i) {
        const std::string what = std::string(adamw ? "adamw8bit" : "sgd8bit") + " tensor " +
                                 std::to_string(i) + (skip ? ", skipped" : "");
        const AdamW8bitParam& a = listed[i];
        const AdamW8bitParam& b = skip ? before[i] : each[i];
        ASSERT_EQ(a.param.ToDoubles(), b.param.ToDoubles()) << what;
        ASSERT_EQ(a.m_codes.ToDoubles(), b.m_codes.ToDoubles()) << what;
        ASSERT_EQ(a.m_absmax.ToDoubles(), b.m_absmax.ToDoubles()) << what;
        ASSERT_EQ(a.v_codes.ToDoubles(), b.v_codes.ToDoubles()) << what;
        ASSERT_EQ(a.v_absmax.ToDoubles(), b.v_absmax.ToDoubles()) << what;
        if (a.model_copy.defined()) {
          ASSERT_EQ(a.model_copy.ToDoubles(), b.model_copy.ToDoubles()) << what;
        }
        if (!skip) {
          ASSERT_NE(a.param.ToDoubles(), before[i].param.ToDoubles()) << what;
          ASSERT_NE(a.m_codes.ToDoubles(), before[i].m_codes.ToDoubles()) << what;
        }
      }
    }
  }
}

// The 8-bit steps (bitsandbytes' blockwise states) against the CPU kernel:
// from states three CPU steps have built, one fused GPU step gives the CPU's
// codes and absmax values bit for bit (the kernel does the CPU's f32
// operations with round-to-nearest intrinsics, no FMAs) and its weights to
// 1e-6 (the bias corrections use the device's f64 pow, which may differ from
// the host's by an ulp); AdamW's block of zero gradients keeps absmax 0; a set flag changes
// nothing; the model copy is the new weights rounded.
TEST_F(CudaBackendTest, Fp8CastsDecodesAndScalingEqualTheCpuBitForBit) {
  // Two scaled tensors: column 0 E4M3 (a forward tensor), 1 E5M2 (a
  // gradient); values beyond the scaled range saturate, a NaN is passed over
  // by the amax.
  const int64_t len = 16, cols = 2;
  // NaN compares equal to NaN here (the NaN input's code decodes to NaN, and
  // a NaN amax rolls through the history).
  const auto values = [](const Tensor& t) {
    std::vector<double> v = t.ToDoubles();
    for (double& e : v) e = std::isnan(e) ? -12345.0 : e;
    return v;
  };
  for (DType d : kLowAndF32) {
    for (core::Fp8Format f : {core::Fp8Format::kE4M3, core::Fp8Format::kE5M2}) {
      const int64_t col = f == core::Fp8Format::kE4M3 ? 0 : 1;
      const std::string what = std::string(DTypeName(d)) + " " + core::Fp8FormatName(f);
      Tensor x = Random({3, 1000 + 77}, d, 60, -300, 300);  // several blocks, a partial one
      if (d == DType::kF32) x.data<float>()[5] = std::nanf("");
      Tensor scales = Tensor::FromVector({3.5f, 0.25f}, {cols}, DType::kF32);
      Tensor history = Tensor::Zeros({len, cols}, DType::kF32);
      history.data<float>()[col] = 7.0f;  // an earlier cast this step: the max is kept
      Tensor g_history = G(history);
      Tensor saturated = Tensor::Zeros({cols}, DType::kF64);
      saturated.data<double>()[col] = 2;  // earlier casts' count: added to
      Tensor g_saturated = G(saturated);
      Tensor want = Cpu<Fp8CastKernel>()(x, f, scales, history, col, saturated);
      Tensor got = Gpu<Fp8CastKernel>()(G(x), f, G(scales), g_history, col, g_saturated);
      ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
      EXPECT_EQ(got.ToDoubles(), want.ToDoubles()) << what << " codes";
      EXPECT_EQ(g_history.ToDoubles(), history.ToDoubles()) << what << " amax";
      EXPECT_EQ(g_saturated.ToDoubles(), saturated.ToDoubles()) << what << " saturated";
      // |x| up to 300 at 3.5 clips past E4M3's 448; at 0.25 nothing does.
      if (f == core::Fp8Format::kE4M3) {
        EXPECT_GT(saturated.data<double>()[col], 100.0) << what;
      } else {
        EXPECT_EQ(saturated.data<double>()[col], 2.0) << what;
      }
      EXPECT_GT(history.data<float>()[col], 250.0f) << what;  // max |x|, NaN passed over
      for (DType out : kLowAndF32) {
        Tensor inv = Tensor::FromVector({1 / 3.5f, 4.0f}, {cols}, DType::kF32);
        EXPECT_EQ(values(Gpu<Fp8DecodeKernel>()(got, f, G(inv), col, out)),
                  values(Cpu<Fp8DecodeKernel>()(want, f, inv, col, out)))
            << what << " decoded to " << DTypeName(out);
      }
    }
  }
  // The cast-transpose: the cast's codes, amax and count, and the codes
  // transposed, bit for bit; 200 x 5000 is more 32 x 32 tiles (1099) than
  // the kernel has blocks, with partial tiles on both edges.
  for (DType d : kLowAndF32) {
    for (core::Fp8Format f : {core::Fp8Format::kE4M3, core::Fp8Format::kE5M2}) {
      const std::string what =
          "cast-transpose " + std::string(DTypeName(d)) + " " + core::Fp8FormatName(f);
      Tensor x = Random({200, 5000}, d, 62, -300, 300);
      Tensor scales = Tensor::FromVector({3.5f, 0.25f}, {2}, DType::kF32);
      Tensor history = Tensor::Zeros({len, 2}, DType::kF32), g_history = G(history);
      Tensor saturated = Tensor::Zeros({2}, DType::kF64), g_saturated = G(saturated);
      const Fp8CastTransposeResult want =
          Cpu<Fp8CastTransposeKernel>()(x, f, scales, history, 0, saturated);
      const Fp8CastTransposeResult got =
          Gpu<Fp8CastTransposeKernel>()(G(x), f, G(scales), g_history, 0, g_saturated);
      ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
      ASSERT_EQ(got.transposed.shape(), (std::vector<int64_t>{5000, 200})) << what;
      EXPECT_EQ(got.codes.ToDoubles(), want.codes.ToDoubles()) << what << " codes";
      EXPECT_EQ(got.transposed.ToDoubles(), want.transposed.ToDoubles()) << what << " transposed";
      EXPECT_EQ(want.transposed.ToDoubles()[1 * 200 + 3], want.codes.ToDoubles()[3 * 5000 + 1])
          << what;  // it is the transpose
      EXPECT_EQ(g_history.ToDoubles(), history.ToDoubles()) << what << " amax";
      EXPECT_EQ(g_saturated.ToDoubles(), saturated.ToDoubles()) << what << " saturated";
      EXPECT_GT(history.data<float>()[0], 250.0f) << what;
    }
  }
  // The update over a history with zeros, a NaN, an Inf and a tiny amax.
  const int64_t n = 300;
  std::vector<float> h(len * n), scale(n), scaled_max(n);
  std::mt19937 gen(61);
  std::uniform_real_distribution<float> u(0.0f, 100.0f);
  for (float& v : h) v = u(gen);
  for (int64_t c = 0; c < n; ++c) {
    scale[c] = 1.0f + c;
    scaled_max[c] = c % 2 ? 57344.0f : 448.0f;
  }
  for (int64_t c = 0; c < n; c += 7) h[c] = 0.0f;  // this step's amax is 0: the max of the rest
  h[3] = std::nanf("");
  h[4] = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < len; ++i) h[i * n + 5] = 1e-44f;  // the quotient overflows
  for (core::AmaxAlgo algo : {core::AmaxAlgo::kMax, core::AmaxAlgo::kMostRecent}) {
    Tensor history = Tensor::FromVector(h, {len, n}, DType::kF32);
    Tensor scales = Tensor::FromVector(scale, {n}, DType::kF32);
    Tensor invs = Tensor::Zeros({n}, DType::kF32);
    Tensor maxes = Tensor::FromVector(scaled_max, {n}, DType::kF32);
    Tensor gh = G(history), gs = G(scales), gi = G(invs);
    Cpu<Fp8UpdateScalingKernel>()(history, scales, invs, maxes, algo);
    Gpu<Fp8UpdateScalingKernel>()(gh, gs, gi, G(maxes), algo);
    ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
    EXPECT_EQ(values(gh), values(history)) << "rolled history";
    EXPECT_EQ(gs.ToDoubles(), scales.ToDoubles()) << "scales";
    EXPECT_EQ(gi.ToDoubles(), invs.ToDoubles()) << "inverse scales";
    EXPECT_EQ(scales.data<float>()[5], std::numeric_limits<float>::max());
    EXPECT_EQ(history.data<float>()[0], 0.0f);  // slot 0 freed for the next step
  }
}

TEST_F(CudaBackendTest, EightBitStepsGiveTheCpuCodesBitForBitAndSkipOnTheFlag) {
  using backend::AdamW8bitStepKernel;
  using backend::QuantBlocks;
  using backend::Sgd8bitStepKernel;
  const int64_t n = 5 * 256 + 77;  // a partial last block
  const Backend::FusedStepArgs none;
  for (bool adamw : {false, true}) {
    for (bool skip : {false, true}) {
      const std::string what =
          std::string(adamw ? "adamw8bit" : "sgd8bit") + (skip ? " skipped" : "");
      Tensor p = Random({n}, DType::kF32, 40);
      Tensor c1 = Tensor::Zeros({n}, DType::kU8), a1 = Tensor::Zeros({QuantBlocks(n)}, DType::kF32);
      Tensor c2 = Tensor::Zeros({n}, DType::kU8), a2 = Tensor::Zeros({QuantBlocks(n)}, DType::kF32);
      Backend::AdamWHyper ah;
      ah.lr = 1e-3f;
      ah.weight_decay = 0.01f;
      Backend::SgdHyper sh;
      sh.lr = 0.1f;
      sh.momentum = 0.9f;
      sh.weight_decay = 1e-4f;
      auto grad = [&](uint32_t seed) {
        Tensor g = Random({n}, DType::kF32, seed, -1, 1);
        for (int64_t i = 256; i < 512; ++i) g.data<float>()[i] = 0;  // block 1 stays zero
        return g;
      };
      auto cpu_step = [&](const Tensor& g, int64_t step, const Backend::FusedStepArgs& args) {
        if (adamw) {
          ah.step = step;
          Cpu<AdamW8bitStepKernel>()(p, g, c1, a1, c2, a2, ah, args);
        } else {
          Cpu<Sgd8bitStepKernel>()(p, g, c1, a1, sh, step == 1, args);
        }
      };
      for (int step = 1; step <= 3; ++step) cpu_step(grad(40 + step), step, none);
      Tensor g = grad(50);
      Tensor gp = G(p), gc1 = G(c1), ga1 = G(a1), gc2 = G(c2), ga2 = G(a2);
      Tensor copy = Tensor::Zeros({n}, DType::kBF16, Device::kCuda);
      Backend::FusedStepArgs args;
      args.found_inf = Tensor::Full({1}, DType::kF32, skip ? 1.0 : 0.0, Device::kCuda);
      args.model_copy = copy;
      args.step = Tensor::Full({1}, DType::kF32, 3.0, Device::kCuda);  // 3 applied before
      const std::vector<double> p0 = p.ToDoubles(), c0 = c1.ToDoubles(), m0 = a1.ToDoubles();
      if (adamw) {
        Gpu<AdamW8bitStepKernel>()(gp, G(g), gc1, ga1, gc2, ga2, ah, args);
      } else {
        Gpu<Sgd8bitStepKernel>()(gp, G(g), gc1, ga1, sh, false, args);
      }
      ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
      if (skip) {
        EXPECT_EQ(gp.ToDoubles(), p0) << what;  // untouched, bit for bit
        EXPECT_EQ(gc1.ToDoubles(), c0) << what;
        EXPECT_EQ(ga1.ToDoubles(), m0) << what;
        EXPECT_EQ(copy.ToDoubles(), std::vector<double>(n, 0.0)) << what;
        continue;
      }
      cpu_step(g, 4, none);
      EXPECT_EQ(gc1.ToDoubles(), c1.ToDoubles()) << what << " codes";
      EXPECT_EQ(ga1.ToDoubles(), a1.ToDoubles()) << what << " absmax";
      if (adamw) {
        EXPECT_EQ(a1.ToDoubles()[1], 0.0) << what << ": the zero block";  // (SGD decays into it)
        EXPECT_EQ(gc2.ToDoubles(), c2.ToDoubles()) << what << " second-moment codes";
        EXPECT_EQ(ga2.ToDoubles(), a2.ToDoubles()) << what << " second-moment absmax";
      }
      ExpectClose(gp, p, 1e-6, what);
      ExpectClose(copy, Cpu<CastKernel>()(p, DType::kBF16), Tol(DType::kBF16),
                  what + " model copy");
    }
  }
}

TEST_F(CudaBackendTest, ErrorsBecomeStatusesAndTheNextJobStartsClean) {
  Tensor huge = gpu_->Allocate({int64_t{1} << 48}, DType::kF32, false);  // 1 PiB
  absl::Status health = gpu_->Health();
  EXPECT_EQ(health.code(), absl::StatusCode::kResourceExhausted) << health;
  EXPECT_NE(health.message().find("device memory"), std::string::npos) << health;
  EXPECT_TRUE(gpu_->Ready().ok());  // what Trainer::Create calls for the next job
  EXPECT_TRUE(gpu_->Health().ok());
}

const data::Dataset& Data() { return testing::SyntheticData(4096, 64, 10, 11); }

TrainerConfig Config(const std::string& precision, Device device) {
  TrainerConfig c = testing::MlpTrainerConfig(64, {256, 256}, 10, precision, device);
  c.optimizer.kind = OptimizerSpec::Kind::kAdamW;
  c.optimizer.lr = 3e-3;
  c.training.steps = 60;
  c.training.batch_size = 128;
  c.training.seed = 5;
  return c;
}

TEST_F(CudaBackendTest, TrainingOnTheGpuTracksTheCpuRunAndAllocatesOnlyWhileWarmingUp) {
  for (const char* mode : {"32-true", "bf16-mixed", "16-mixed"}) {
    auto cpu_trainer = Trainer::Create(Config(mode, Device::kCpu), &Data(), nullptr);
    auto gpu_trainer = Trainer::Create(Config(mode, Device::kCuda), &Data(), nullptr);
    ASSERT_TRUE(cpu_trainer.ok() && gpu_trainer.ok());
    std::vector<double> cpu_loss, gpu_loss;
    int64_t allocations_after_warmup = 0;
    for (int step = 0; step < 60; ++step) {
      cpu_loss.push_back((*cpu_trainer)->RunStep().loss);
      gpu_loss.push_back((*gpu_trainer)->RunStep().loss);
      if (step == 4) allocations_after_warmup = cuda::CudaMemoryStats().device_allocations;
    }
    ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
    EXPECT_EQ(cuda::CudaMemoryStats().device_allocations, allocations_after_warmup)
        << mode << ": steady-state steps must not call cudaMalloc";
    // Same model, data and numerics up to summation order: the curves agree.
    const double tol = std::string(mode) == "32-true" ? 1e-3 : 3e-2;
    for (int step : {0, 10, 30, 59}) {
      EXPECT_NEAR(gpu_loss[step], cpu_loss[step], tol * std::max(1.0, cpu_loss[step]))
          << mode << " step " << step + 1;
    }
    EXPECT_LT(gpu_loss.back(), 0.7 * gpu_loss.front()) << mode;
    EXPECT_GT(cuda::CudaMemoryStats().peak_in_use_bytes, 0);
  }
}

// A small CNN (conv, batch norm, a residual block) through the trainer's
// device path: cuDNN's convolutions, our pooling and batch norm kernels, the
// running statistics kept on the device; the run tracks the CPU's.
TEST_F(CudaBackendTest, TrainingACnnOnTheGpuTracksTheCpuRun) {
  auto conv = [](int64_t out) {
    nn::LayerSpec l;
    l.kind = nn::LayerKind::kConv2d;
    l.out = out;
    l.kernel[0] = l.kernel[1] = 3;
    l.padding[0] = l.padding[1] = 1;
    return l;
  };
  auto of = [](nn::LayerKind kind) {
    nn::LayerSpec l;
    l.kind = kind;
    return l;
  };
  nn::SequentialSpec cnn;
  cnn.input_shape = {1, 8, 8};  // the 64 features as an image
  cnn.num_classes = 10;
  nn::LayerSpec res = of(nn::LayerKind::kResidual);
  res.body = {conv(8), of(nn::LayerKind::kBatchNorm2d), of(nn::LayerKind::kActivation), conv(8)};
  res.activation_after = true;
  nn::LayerSpec head = of(nn::LayerKind::kLinear);
  head.out = 10;
  cnn.layers = {conv(8), of(nn::LayerKind::kBatchNorm2d), of(nn::LayerKind::kActivation),
                res,     of(nn::LayerKind::kFlatten),     head};
  for (const char* mode : {"32-true", "bf16-mixed"}) {
    std::vector<double> loss[2];
    std::vector<float> running_var[2];
    for (Device d : {Device::kCpu, Device::kCuda}) {
      TrainerConfig c = Config(mode, d);
      c.model = cnn;
      c.training.steps = 30;
      c.training.batch_size = 32;
      auto t = Trainer::Create(c, &Data(), nullptr);
      ASSERT_TRUE(t.ok()) << t.status();
      for (int step = 0; step < 30; ++step) {
        loss[d == Device::kCuda].push_back((*t)->RunStep().loss);
      }
      running_var[d == Device::kCuda] = (*t)->model().buffers()[1].value.ToFloats();
    }
    ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
    const double tol = std::string(mode) == "32-true" ? 1e-3 : 3e-2;
    for (int step : {0, 10, 29}) {
      EXPECT_NEAR(loss[1][step], loss[0][step], tol * std::max(1.0, loss[0][step]))
          << mode << " step " << step + 1;
    }
    EXPECT_LT(loss[1].back(), 0.8 * loss[1].front()) << mode;
    ASSERT_EQ(running_var[1].size(), running_var[0].size());
    for (size_t i = 0; i < running_var[0].size(); ++i) {
      EXPECT_NEAR(running_var[1][i], running_var[0][i], tol * std::max(1.0f, running_var[0][i]))
          << mode << " 1.running_var[" << i << "]";
    }
  }
}

// 8-bit AdamW states through the trainer's device path (the fused 8-bit
// step, skip flag and model copy on the device): the run tracks the CPU's.
TEST_F(CudaBackendTest, TrainingWithEightBitStatesTracksTheCpuRun) {
  std::vector<double> loss[2];
  for (Device d : {Device::kCpu, Device::kCuda}) {
    TrainerConfig c = Config("bf16-mixed", d);
    c.optimizer.state_bits = 8;
    c.training.steps = 30;
    auto t = Trainer::Create(c, &Data(), nullptr);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->optimizer().has_8bit_states());
    for (int step = 0; step < 30; ++step) loss[d == Device::kCuda].push_back((*t)->RunStep().loss);
  }
  ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
  for (int step : {0, 10, 29}) {
    EXPECT_NEAR(loss[1][step], loss[0][step], 3e-2 * std::max(1.0, loss[0][step]))
        << "step " << step + 1;
  }
  EXPECT_LT(loss[1].back(), 0.7 * loss[1].front());
}

// SGD with momentum, gradient clipping, two micro-batches per step and a loss
// scale so large that f16 gradients overflow for the first steps: the device
// path skips the same steps, backs the scale off the same way and clips to
// the same norms as the CPU.
TEST_F(CudaBackendTest, SkipStormsClippingAndAccumulationMatchTheCpuStepForStep) {
  TrainerConfig base = Config("16-mixed", Device::kCpu);
  MlpSpec mlp = std::get<MlpSpec>(base.model);
  mlp.hidden = {64};
  mlp.layer_norm = false;
  base.model = mlp;
  base.optimizer.kind = OptimizerSpec::Kind::kSgd;
  base.optimizer.lr = 0.05;
  base.optimizer.momentum = 0.9;
  base.optimizer.weight_decay = 1e-4;
  base.precision.loss_scaling.init_scale = std::ldexp(1.0, 40);
  base.precision.loss_scaling.growth_interval = 5;
  base.training.steps = 40;
  base.training.batch_size = 32;
  base.training.grad_accumulation = 2;
  base.training.clip_norm = 0.5;
  TrainerConfig on_gpu = base;
  on_gpu.device = Device::kCuda;
  auto cpu_trainer = Trainer::Create(base, &Data(), nullptr);
  auto gpu_trainer = Trainer::Create(on_gpu, &Data(), nullptr);
  ASSERT_TRUE(cpu_trainer.ok()) << cpu_trainer.status();
  ASSERT_TRUE(gpu_trainer.ok()) << gpu_trainer.status();
  int skipped = 0;
  for (int step = 0; step < 40; ++step) {
    const StepMetrics c = (*cpu_trainer)->RunStep();
    const StepMetrics g = (*gpu_trainer)->RunStep();
    ASSERT_EQ(g.skipped, c.skipped) << "step " << step + 1;
    ASSERT_EQ(g.loss_scale, c.loss_scale) << "step " << step + 1;
    EXPECT_NEAR(g.loss, c.loss, 2e-2 * std::max(1.0, c.loss)) << "step " << step + 1;
    if (!c.skipped) {
      EXPECT_NEAR(g.grad_norm, c.grad_norm, 2e-2 * std::max(1.0, c.grad_norm))
          << "step " << step + 1;
    }
    skipped += c.skipped;
  }
  ASSERT_TRUE(gpu_->Health().ok()) << gpu_->Health();
  EXPECT_GE(skipped, 10) << "the storm should skip the first steps";
  EXPECT_LT(skipped, 40);
}

}  // namespace
}  // namespace ampd::engine
