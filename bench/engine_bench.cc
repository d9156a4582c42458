// The engine benchmark (not a test; see bench/README.md).
//
// 1. mlp_step: the real training step (Trainer::RunStep: batch, autocast
//    forward, loss, scaled backward, gradients to f32, unscale + non-finite
//    check, grad norm, AdamW) of an MLP, for several precision modes side by
//    side in one process. Repetitions are interleaved (round r runs every mode
//    once, starting at a different mode each round) so that noise from other
//    work on the machine spreads over all modes; the median round is reported.
// 2. gemm: each GEMM of that step (forward x.W^T, backward dX = dY.W and
//    dW = dY^T.X) through the engine's Backend::Matmul, against a oneDNN matmul
//    primitive with the same layouts created once and executed on buffers
//    allocated once. Also interleaved, median reported.
//
//   bazel run -c opt //bench:engine_bench -- [--json] [--steps=N] [--rounds=N]
//       [--warmup=N] [--batch=N] [--hidden=2048,2048] [--precisions=a,b,...]
//       [--gemm_ms=N] [--no_mlp] [--no_gemm]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/amp/precision.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/cpu/adamw8bit_coder.h"
#include "engine/cpu/bf16_gemm_route.h"
#include "engine/cpu/blockwise_quant.h"
#include "engine/cpu/capabilities.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/host_memory.h"
#include "engine/data/dataset.h"
#include "engine/train/trainer.h"
#include "oneapi/dnnl/dnnl.hpp"

ABSL_FLAG(bool, json, false, "JSON lines instead of tables");
ABSL_FLAG(int64_t, steps, 5, "Timed training steps per precision per round");
ABSL_FLAG(int64_t, rounds, 7, "Interleaved rounds (the median is reported)");
ABSL_FLAG(int64_t, warmup, 3, "Untimed steps per precision first");
ABSL_FLAG(int64_t, batch, 256, "Batch size");
ABSL_FLAG(std::vector<std::string>, hidden, std::vector<std::string>({"2048", "2048"}),
          "Hidden widths (784-H1-...-10)");
ABSL_FLAG(std::vector<std::string>, precisions,
          std::vector<std::string>({"32-true", "bf16-mixed", "bf16-mixed+adamw8bit", "16-mixed",
                                    "bf16-true", "O2"}),
          "Precision modes (any ResolvePrecision accepts; MODE+adamw8bit: with 8-bit AdamW "
          "states)");
ABSL_FLAG(int64_t, gemm_ms, 50, "Minimum length of one timed batch of GEMM calls (ms)");
ABSL_FLAG(bool, no_mlp, false, "Skip the training-step section");
ABSL_FLAG(bool, no_gemm, false, "Skip the GEMM section");

namespace ampd::bench {
namespace {

using engine::DType;
using engine::Tensor;
using Clock = std::chrono::steady_clock;

constexpr int64_t kInputDim = 784;
constexpr int64_t kClasses = 10;

struct Options {
  bool json = false;
  int64_t steps = 5;   // timed steps per mode per round
  int64_t rounds = 7;  // interleaved rounds (MLP and GEMM)
  int64_t warmup = 3;  // untimed steps per mode first
  int64_t batch = 256;
  std::vector<int64_t> hidden = {2048, 2048};
  std::vector<std::string> precisions = {"32-true",  "bf16-mixed", "bf16-mixed+adamw8bit",
                                         "16-mixed", "bf16-true",  "O2"};
  double gemm_ms = 50;  // minimum time of one timed GEMM batch
  bool mlp = true;
  bool gemm = true;
};

bool ReadFlags(Options* o) {
  o->json = absl::GetFlag(FLAGS_json);
  o->mlp = !absl::GetFlag(FLAGS_no_mlp);
  o->gemm = !absl::GetFlag(FLAGS_no_gemm);
  o->steps = absl::GetFlag(FLAGS_steps);
  o->rounds = absl::GetFlag(FLAGS_rounds);
  o->warmup = absl::GetFlag(FLAGS_warmup);
  o->batch = absl::GetFlag(FLAGS_batch);
  o->gemm_ms = static_cast<double>(absl::GetFlag(FLAGS_gemm_ms));
  for (const auto& [name, value, min] :
       {std::tuple<const char*, int64_t, int64_t>{"steps", o->steps, 1},
        {"rounds", o->rounds, 1},
        {"warmup", o->warmup, 0},
        {"batch", o->batch, 1},
        {"gemm_ms", absl::GetFlag(FLAGS_gemm_ms), 1}}) {
    if (value < min) {
      std::fprintf(stderr, "--%s: expected an integer >= %lld, got %lld\n", name,
                   static_cast<long long>(min), static_cast<long long>(value));
      return false;
    }
  }
  o->hidden.clear();
  for (const std::string& part : absl::GetFlag(FLAGS_hidden)) {
    int64_t h = 0;
    if (!absl::SimpleAtoi(part, &h) || h < 1) {
      std::fprintf(stderr, "--hidden: expected integers >= 1, got '%s'\n", part.c_str());
      return false;
    }
    o->hidden.push_back(h);
  }
  o->precisions = absl::GetFlag(FLAGS_precisions);
  if (o->hidden.empty() || o->precisions.empty()) {
    std::fprintf(stderr, "--hidden and --precisions must not be empty\n");
    return false;
  }
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string LayersJson(const Options& o) {
  std::vector<int64_t> layers = {kInputDim};
  layers.insert(layers.end(), o.hidden.begin(), o.hidden.end());
  layers.push_back(kClasses);
  return absl::StrCat("[", absl::StrJoin(layers, ","), "]");
}

std::string LayersText(const Options& o) {
  std::vector<int64_t> layers = {kInputDim};
  layers.insert(layers.end(), o.hidden.begin(), o.hidden.end());
  layers.push_back(kClasses);
  return absl::StrJoin(layers, "-");
}

const char* IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

void PrintMeta(const Options& o) {
  const dnnl_version_t* v = dnnl::version();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string isa = IsaName(dnnl::get_effective_cpu_isa());
  // The 8-bit states' coder: the fused block's (VBMI CPUs) or blockwise_quant's path.
  const std::string coder =
      engine::cpu::HasQuantPath(engine::cpu::QuantPath::kAvx512Vbmi)
          ? std::string("fused, ") + engine::cpu::FusedCoderName(engine::cpu::ResolvedFusedCoder())
          : std::string("unfused, ") + engine::cpu::QuantPathName(engine::cpu::QuantPath::kBest);
  const char* route = engine::cpu::Bf16GemmRouteName(engine::cpu::ChosenBf16GemmRoute().route);
  if (o.json) {
    std::printf(
        "{\"bench\":\"meta\",\"onednn\":\"%d.%d.%d\",\"onednn_isa\":\"%s\","
        "\"half_conversions\":\"%s\",\"adamw8bit_coder\":\"%s\",\"bf16_gemm_route\":\"%s\","
        "\"hardware_threads\":%u,\"omp_num_threads\":\"%s\"}\n",
        v->major, v->minor, v->patch, isa.c_str(), engine::core::HalfConversionPath(),
        coder.c_str(), route, std::thread::hardware_concurrency(), omp ? omp : "");
  } else {
    std::printf(
        "oneDNN %d.%d.%d, ISA %s; half conversions: %s; 8-bit coder: %s; bf16 GEMMs: %s; %u "
        "hardware threads%s%s\n\n",
        v->major, v->minor, v->patch, isa.c_str(), engine::core::HalfConversionPath(),
        coder.c_str(), route, std::thread::hardware_concurrency(), omp ? ", OMP_NUM_THREADS=" : "",
        omp ? omp : "");
  }
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// MLP training step

struct ModeRun {
  std::string name;
  std::unique_ptr<engine::train::Trainer> trainer;
  std::vector<double> round_step_s;  // mean step time of each round
  int64_t skipped = 0;               // timed steps the scaler skipped
};

int RunMlp(const Options& o) {
  engine::data::SyntheticSpec data_spec;
  data_spec.num_examples = o.batch * 8;
  data_spec.feature_dim = kInputDim;
  data_spec.num_classes = static_cast<int>(kClasses);
  data_spec.seed = 1;
  absl::StatusOr<engine::data::Dataset> data = engine::data::MakeSyntheticDataset(data_spec);
  if (!data.ok()) {
    std::fprintf(stderr, "synthetic data: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }

  std::vector<ModeRun> runs;
  for (const std::string& name : o.precisions) {
    // "MODE+adamw8bit": the same mode with 8-bit AdamW states.
    const std::string suffix = "+adamw8bit";
    const bool eight_bit = name.size() > suffix.size() &&
                           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string mode = eight_bit ? name.substr(0, name.size() - suffix.size()) : name;
    absl::StatusOr<engine::amp::PrecisionConfig> precision = engine::amp::ResolvePrecision(mode);
    if (!precision.ok()) {
      std::fprintf(stderr, "%s\n", std::string(precision.status().message()).c_str());
      return 1;
    }
    engine::train::TrainerConfig config;
    engine::nn::MlpSpec mlp;
    mlp.input_dim = kInputDim;
    mlp.hidden = o.hidden;
    mlp.num_classes = kClasses;
    config.model = mlp;
    config.precision = *precision;
    config.optimizer.kind = engine::optim::OptimizerSpec::Kind::kAdamW;
    config.optimizer.lr = 1e-3;
    config.optimizer.state_bits = eight_bit ? 8 : 32;
    config.training.steps = 1 << 30;  // constant schedule; never reached
    config.training.batch_size = o.batch;
    config.training.seed = 0;
    absl::StatusOr<std::unique_ptr<engine::train::Trainer>> trainer =
        engine::train::Trainer::Create(config, &*data, nullptr);
    if (!trainer.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   std::string(trainer.status().message()).c_str());
      return 1;
    }
    runs.push_back({name, *std::move(trainer), {}, 0});
  }

  for (ModeRun& run : runs) {
    for (int64_t s = 0; s < o.warmup; ++s) run.trainer->RunStep();
  }
  const size_t n = runs.size();
  for (int64_t r = 0; r < o.rounds; ++r) {
    for (size_t i = 0; i < n; ++i) {
      ModeRun& run = runs[(r + i) % n];
      const Clock::time_point start = Clock::now();
      for (int64_t s = 0; s < o.steps; ++s) {
        if (run.trainer->RunStep().skipped) ++run.skipped;
      }
      run.round_step_s.push_back(SecondsSince(start) / o.steps);
    }
  }

  double base_s = 0;
  for (const ModeRun& run : runs) {
    if (run.name == "32-true") base_s = Median(run.round_step_s);
  }
  if (!o.json) {
    std::printf("MLP training step %s, batch %lld, AdamW: median of %lld rounds x %lld steps\n",
                LayersText(o).c_str(), static_cast<long long>(o.batch),
                static_cast<long long>(o.rounds), static_cast<long long>(o.steps));
    std::printf("%-20s %10s %10s %12s %11s %8s\n", "precision", "step ms", "best ms", "samples/s",
                "vs 32-true", "skipped");
  }
  for (const ModeRun& run : runs) {
    const double med = Median(run.round_step_s);
    const double best = Min(run.round_step_s);
    const double sps = o.batch / med;
    const double ratio = base_s > 0 ? base_s / med : 0;
    if (o.json) {
      std::printf(
          "{\"bench\":\"mlp_step\",\"precision\":\"%s\",\"batch\":%lld,\"layers\":%s,"
          "\"samples_per_s\":%.1f,\"step_ms\":%.3f,\"step_ms_best\":%.3f,",
          run.name.c_str(), static_cast<long long>(o.batch), LayersJson(o).c_str(), sps, med * 1e3,
          best * 1e3);
      if (base_s > 0) {
        std::printf("\"ratio_vs_32_true\":%.3f,", ratio);
      } else {
        std::printf("\"ratio_vs_32_true\":null,");
      }
      std::printf("\"rounds\":%lld,\"steps_per_round\":%lld,\"skipped_steps\":%lld}\n",
                  static_cast<long long>(o.rounds), static_cast<long long>(o.steps),
                  static_cast<long long>(run.skipped));
    } else {
      std::printf("%-20s %10.2f %10.2f %12.1f", run.name.c_str(), med * 1e3, best * 1e3, sps);
      if (base_s > 0) {
        std::printf(" %10.2fx", ratio);
      } else {
        std::printf(" %11s", "-");
      }
      std::printf(" %8lld\n", static_cast<long long>(run.skipped));
    }
  }
  // The 8-bit issue's criterion: an 8-bit AdamW step is no slower than the
  // same mode's 32-bit one, measured in this run (medians of interleaved rounds).
  for (const ModeRun& eight : runs) {
    const std::string suffix = "+adamw8bit";
    if (eight.name.size() <= suffix.size() ||
        eight.name.compare(eight.name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string mode = eight.name.substr(0, eight.name.size() - suffix.size());
    for (const ModeRun& full : runs) {
      if (full.name != mode) continue;
      const double r = Median(eight.round_step_s) / Median(full.round_step_s);
      if (o.json) {
        std::printf(
            "{\"bench\":\"adamw8bit_vs_32bit\",\"precision\":\"%s\",\"ratio\":%.3f,"
            "\"no_slower\":%s}\n",
            mode.c_str(), r, r <= 1.0 ? "true" : "false");
      } else {
        std::printf(
            "%s: the 8-bit AdamW step takes %.2fx the 32-bit one's time (target <= 1.00: "
            "%s)\n",
            mode.c_str(), r, r <= 1.0 ? "met" : "NOT met");
      }
    }
  }
  if (!o.json) std::printf("\n");
  std::fflush(stdout);
  return 0;
}

// ---------------------------------------------------------------------------
// GEMMs of the step: engine Backend::Matmul vs oneDNN called directly

struct GemmShape {
  std::string name;  // "fc1.fwd", "fc2.dx", "head.dw", ...
  int64_t m, n, k;
  bool trans_a, trans_b;
  std::vector<int64_t> a_shape, b_shape;  // as the engine stores them
};

// The GEMMs engine::ops::Linear runs for x [B, in], w [out, in].
std::vector<GemmShape> StepGemms(const Options& o) {
  std::vector<int64_t> dims = {kInputDim};
  dims.insert(dims.end(), o.hidden.begin(), o.hidden.end());
  dims.push_back(kClasses);
  const int64_t b = o.batch;
  std::vector<GemmShape> shapes;
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    const int64_t in = dims[l], out = dims[l + 1];
    const std::string layer = l + 2 == dims.size() ? "head" : absl::StrCat("fc", l + 1);
    // y = x @ w^T; dX = dY @ w; dW = dY^T @ x.
    shapes.push_back({layer + ".fwd", b, out, in, false, true, {b, in}, {out, in}});
    shapes.push_back({layer + ".dx", b, in, out, false, false, {b, out}, {out, in}});
    shapes.push_back({layer + ".dw", out, in, b, true, false, {b, out}, {b, in}});
  }
  return shapes;
}

Tensor RandomTensor(const std::vector<int64_t>& shape, DType dtype, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<int64_t>(s >> 40) - (int64_t{1} << 23)) * 0x1.0p-23f;
  }
  return Tensor::FromVector(v, shape, dtype);
}

// A oneDNN matmul on fixed buffers: primitive, memory objects and stream made once.
class DirectMatmul {
 public:
  DirectMatmul(const dnnl::engine& eng, const GemmShape& s, dnnl::memory::data_type dt,
               const void* a, const void* b)
      : stream_(eng) {
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc ad({s.m, s.k}, dt, s.trans_a ? tag::ba : tag::ab);
    dnnl::memory::desc bd({s.k, s.n}, dt, s.trans_b ? tag::ba : tag::ab);
    dnnl::memory::desc cd({s.m, s.n}, dt, tag::ab);
    prim_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
    dst_.resize(cd.get_size());
    a_ = dnnl::memory(ad, eng, const_cast<void*>(a));
    b_ = dnnl::memory(bd, eng, const_cast<void*>(b));
    c_ = dnnl::memory(cd, eng, dst_.data());
  }
  void Run() {
    prim_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
  }
  const std::vector<uint8_t>& dst() const { return dst_; }

 private:
  dnnl::stream stream_;
  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_;
  std::vector<uint8_t> dst_;
};

template <typename F>
double TimePerCall(F&& f, int64_t iters) {
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < iters; ++i) f();
  return SecondsSince(start) / iters;
}

struct GemmTotals {
  double engine_s = 0, onednn_s = 0;
};

int RunGemm(const Options& o) {
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const auto matmul = engine::backend::Kernel<engine::backend::MatmulKernel>(engine::Device::kCpu);
  const std::vector<GemmShape> shapes = StepGemms(o);
  const std::vector<std::pair<DType, dnnl::memory::data_type>> dtypes = {
      {DType::kF32, dnnl::memory::data_type::f32}, {DType::kBF16, dnnl::memory::data_type::bf16}};
  if (!o.json) {
    std::printf("GEMMs of one step (engine Backend::Matmul vs oneDNN direct), median of %lld\n",
                static_cast<long long>(o.rounds));
    std::printf("%-6s %-9s %6s %6s %6s %3s %10s %10s %9s %7s %10s\n", "dtype", "gemm", "M", "N",
                "K", "op", "engine ms", "oneDNN ms", "overhead", "same", "GFLOP/s");
  }
  for (const auto& [dtype, dnnl_dt] : dtypes) {
    if (dtype == DType::kBF16 && !engine::cpu::ProbeCpu().bf16_matmul) {
      // oneDNN 2.6 has no bf16 matmul without AVX-512; the engine widens to f32.
      if (!o.json) std::printf("bf16: no oneDNN bf16 matmul on this CPU (engine widens to f32)\n");
      continue;
    }
    GemmTotals totals;
    for (size_t si = 0; si < shapes.size(); ++si) {
      const GemmShape& s = shapes[si];
      const Tensor a = RandomTensor(s.a_shape, dtype, 2 * si + 1);
      const Tensor b = RandomTensor(s.b_shape, dtype, 2 * si + 2);
      DirectMatmul direct(eng, s, dnnl_dt, a.raw(), b.raw());
      auto engine_call = [&] {
        Tensor c = matmul(a, b, s.trans_a, s.trans_b, dtype);
        if (c.numel() != s.m * s.n) std::abort();
      };
      auto direct_call = [&] { direct.Run(); };
      // Warm both (JIT, primitive cache, page faults), check they agree, calibrate.
      engine_call();
      direct.Run();
      const Tensor check = matmul(a, b, s.trans_a, s.trans_b, dtype);
      const bool same = check.nbytes() == direct.dst().size() &&
                        std::memcmp(check.raw(), direct.dst().data(), check.nbytes()) == 0;
      const double once = std::max(TimePerCall(direct_call, 1), 1e-7);
      const int64_t iters =
          std::clamp<int64_t>(static_cast<int64_t>(o.gemm_ms * 1e-3 / once), 1, 10000);
      std::vector<double> eng_s, dir_s;
      for (int64_t r = 0; r < o.rounds; ++r) {
        if (r % 2 == 0) {
          eng_s.push_back(TimePerCall(engine_call, iters));
          dir_s.push_back(TimePerCall(direct_call, iters));
        } else {
          dir_s.push_back(TimePerCall(direct_call, iters));
          eng_s.push_back(TimePerCall(engine_call, iters));
        }
      }
      const double e = Median(eng_s), d = Median(dir_s);
      totals.engine_s += e;
      totals.onednn_s += d;
      const std::string op = absl::StrCat(s.trans_a ? "T" : "N", s.trans_b ? "T" : "N");
      const double gflops = 2.0 * s.m * s.n * s.k / d * 1e-9;
      const char* dt_name = dtype == DType::kF32 ? "f32" : "bf16";
      if (o.json) {
        std::printf(
            "{\"bench\":\"gemm\",\"dtype\":\"%s\",\"gemm\":\"%s\",\"m\":%lld,\"n\":%lld,"
            "\"k\":%lld,\"trans_a\":%s,\"trans_b\":%s,\"engine_ms\":%.4f,\"onednn_ms\":%.4f,"
            "\"ratio\":%.4f,\"overhead\":%.4f,\"identical\":%s,\"onednn_gflops\":%.1f,"
            "\"iters\":%lld}\n",
            dt_name, s.name.c_str(), static_cast<long long>(s.m), static_cast<long long>(s.n),
            static_cast<long long>(s.k), s.trans_a ? "true" : "false", s.trans_b ? "true" : "false",
            e * 1e3, d * 1e3, e / d, e / d - 1, same ? "true" : "false", gflops,
            static_cast<long long>(iters));
      } else {
        std::printf("%-6s %-9s %6lld %6lld %6lld %3s %10.4f %10.4f %+8.1f%% %7s %10.1f\n", dt_name,
                    s.name.c_str(), static_cast<long long>(s.m), static_cast<long long>(s.n),
                    static_cast<long long>(s.k), op.c_str(), e * 1e3, d * 1e3, (e / d - 1) * 100,
                    same ? "yes" : "NO", gflops);
      }
      std::fflush(stdout);
    }
    const char* dt_name = dtype == DType::kF32 ? "f32" : "bf16";
    if (o.json) {
      std::printf(
          "{\"bench\":\"gemm_total\",\"dtype\":\"%s\",\"gemms\":%zu,\"engine_ms\":%.4f,"
          "\"onednn_ms\":%.4f,\"overhead\":%.4f}\n",
          dt_name, shapes.size(), totals.engine_s * 1e3, totals.onednn_s * 1e3,
          totals.engine_s / totals.onednn_s - 1);
    } else {
      std::printf("%-6s %-9s %24s %10.4f %10.4f %+8.1f%%\n\n", dt_name, "all", "",
                  totals.engine_s * 1e3, totals.onednn_s * 1e3,
                  (totals.engine_s / totals.onednn_s - 1) * 100);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ampd::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("The engine benchmark (bench/README.md)");
  absl::ParseCommandLine(argc, argv);
  ampd::engine::cpu::KeepHostMemoryMapped();
  ampd::bench::Options options;
  if (!ampd::bench::ReadFlags(&options)) return 2;
  ampd::bench::PrintMeta(options);
  if (options.mlp) {
    if (int rc = ampd::bench::RunMlp(options); rc != 0) return rc;
  }
  if (options.gemm) {
    if (int rc = ampd::bench::RunGemm(options); rc != 0) return rc;
  }
  return 0;
}
