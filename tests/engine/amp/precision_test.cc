// Precision modes: the table in precision.h, its aliases, and validation.

#include "engine/amp/precision.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "engine/nn/model.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using amp::BuiltinPrecisionNames;
using amp::GradScalerOptions;
using amp::PrecisionConfig;
using amp::ResolvePrecision;
using amp::UpdateDType;
using amp::ValidatePrecision;
using nn::BuildModel;
using nn::MlpSpec;
using nn::Model;
using nn::Parameter;

namespace {

PrecisionConfig Resolve(const std::string& name) {
  absl::StatusOr<PrecisionConfig> c = ResolvePrecision(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.status();
  return c.ok() ? *c : PrecisionConfig{};
}

// Every field except the name.
void ExpectSameConfig(const PrecisionConfig& a, const PrecisionConfig& b) {
  SCOPED_TRACE(a.name + " vs " + b.name);
  EXPECT_EQ(a.autocast, b.autocast);
  EXPECT_EQ(a.autocast_dtype, b.autocast_dtype);
  EXPECT_EQ(a.param_dtype, b.param_dtype);
  EXPECT_EQ(a.master_weights, b.master_weights);
  EXPECT_EQ(a.keep_norms_fp32, b.keep_norms_fp32);
  EXPECT_EQ(a.allow_tf32, b.allow_tf32);
  EXPECT_EQ(a.overrides.op_policies, b.overrides.op_policies);
  EXPECT_EQ(a.overrides.fp32_layers, b.overrides.fp32_layers);
  const GradScalerOptions &x = a.loss_scaling, &y = b.loss_scaling;
  EXPECT_EQ(x.enabled, y.enabled);
  EXPECT_EQ(x.dynamic, y.dynamic);
  EXPECT_EQ(x.init_scale, y.init_scale);
  EXPECT_EQ(x.growth_factor, y.growth_factor);
  EXPECT_EQ(x.backoff_factor, y.backoff_factor);
  EXPECT_EQ(x.growth_interval, y.growth_interval);
  EXPECT_EQ(x.min_scale, y.min_scale);
  EXPECT_EQ(x.max_scale, y.max_scale);
}

void ExpectRejected(const PrecisionConfig& c, const std::string& field) {
  absl::Status s = ValidatePrecision(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), field + ":"))
      << "expected \"" << field << ":\" at the start of: " << s;
}

struct Row {
  const char* name;
  bool autocast;
  DType autocast_dtype;  // only checked when autocast is on
  DType params;
  bool master;
  bool norms_f32;
  bool scaling;
  bool dynamic;
  double init_scale;
};

// The table in precision.h, written out independently.
const Row kTable[] = {
    {"32-true", false, DType::kF32, DType::kF32, false, false, false, false, 0},
    {"16-mixed", true, DType::kF16, DType::kF32, false, false, true, true, 65536.0},
    {"bf16-mixed", true, DType::kBF16, DType::kF32, false, false, false, false, 0},
    {"16-true", false, DType::kF32, DType::kF16, false, false, false, false, 0},
    {"bf16-true", false, DType::kF32, DType::kBF16, false, false, false, false, 0},
    {"O2", false, DType::kF32, DType::kF16, true, true, true, true, 65536.0},
    {"O3", false, DType::kF32, DType::kF16, false, false, true, false, 1.0},
};

TEST(PrecisionTest, EveryModeInTheTable) {
  for (const Row& r : kTable) {
    SCOPED_TRACE(r.name);
    PrecisionConfig c = Resolve(r.name);
    EXPECT_EQ(c.name, r.name);
    EXPECT_EQ(c.autocast, r.autocast);
    if (r.autocast) {
      EXPECT_EQ(c.autocast_dtype, r.autocast_dtype);
    }
    EXPECT_EQ(c.param_dtype, r.params);
    EXPECT_EQ(c.master_weights, r.master);
    EXPECT_EQ(c.keep_norms_fp32, r.norms_f32);
    EXPECT_FALSE(c.allow_tf32);
    EXPECT_EQ(c.loss_scaling.enabled, r.scaling);
    if (r.scaling) {
      EXPECT_EQ(c.loss_scaling.dynamic, r.dynamic);
      EXPECT_EQ(c.loss_scaling.init_scale, r.init_scale);
      // The other scaler fields keep GradScaler's defaults.
      EXPECT_EQ(c.loss_scaling.growth_factor, 2.0);
      EXPECT_EQ(c.loss_scaling.backoff_factor, 0.5);
      EXPECT_EQ(c.loss_scaling.growth_interval, 2000);
    }
    EXPECT_EQ(UpdateDType(c), r.master ? DType::kF32 : r.params);
    EXPECT_TRUE(ValidatePrecision(c).ok()) << ValidatePrecision(c);
  }
}

TEST(PrecisionTest, BuiltinNamesInTableOrderThenApexLevelsThenFp8) {
  EXPECT_EQ(BuiltinPrecisionNames(),
            (std::vector<std::string>{"32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true",
                                      "O0", "O1", "O2", "O3", "fp8-hybrid", "fp8-current",
                                      "transformer-engine-float16"}));
  for (const std::string& name : BuiltinPrecisionNames()) {
    PrecisionConfig c = Resolve(name);
    EXPECT_EQ(c.name, name);
    EXPECT_TRUE(ValidatePrecision(c).ok()) << name;
  }
}

TEST(PrecisionTest, AliasesResolveToEqualConfigs) {
  const PrecisionConfig fp32 = Resolve("32-true");
  ExpectSameConfig(Resolve("32"), fp32);
  ExpectSameConfig(Resolve("fp32"), fp32);
  ExpectSameConfig(Resolve("O0"), fp32);

  const PrecisionConfig f16 = Resolve("16-mixed");
  ExpectSameConfig(Resolve("16"), f16);
  ExpectSameConfig(Resolve("O1"), f16);

  ExpectSameConfig(Resolve("bf16"), Resolve("bf16-mixed"));

  // Lightning aliases take the canonical name; Apex levels keep theirs.
  EXPECT_EQ(Resolve("16").name, "16-mixed");
  EXPECT_EQ(Resolve("32").name, "32-true");
  EXPECT_EQ(Resolve("bf16").name, "bf16-mixed");
  EXPECT_EQ(Resolve("o2").name, "O2");
  // Names are case-insensitive.
  ExpectSameConfig(Resolve("BF16-Mixed"), Resolve("bf16-mixed"));
  ExpectSameConfig(Resolve("o3"), Resolve("O3"));
}

TEST(PrecisionTest, DistinctModesAreNotEqual) {
  // Guards the alias test: the comparison does tell modes apart.
  const PrecisionConfig a = Resolve("16-mixed"), b = Resolve("bf16-mixed");
  EXPECT_NE(a.autocast_dtype, b.autocast_dtype);
  EXPECT_NE(a.loss_scaling.enabled, b.loss_scaling.enabled);
  EXPECT_NE(Resolve("O2").master_weights, Resolve("O3").master_weights);
}

TEST(PrecisionTest, UnknownNameListsTheValidOnes) {
  for (const char* bad : {"fp8", "", "16-bf16", "O4", "bf16_mixed"}) {
    absl::StatusOr<PrecisionConfig> c = ResolvePrecision(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(c.status().message());
    EXPECT_TRUE(absl::StartsWith(msg, "precision:")) << msg;
    EXPECT_TRUE(absl::StrContains(msg, std::string("\"") + bad + "\"")) << msg;
    for (const std::string& name : BuiltinPrecisionNames()) {
      EXPECT_TRUE(absl::StrContains(msg, name)) << name << " missing from: " << msg;
    }
  }
}

// Lightning's "64-true" (and "64") is named as unsupported, with what to use.
TEST(PrecisionTest, DoublePrecisionIsRefusedWithTheAlternative) {
  for (const char* name : {"64-true", "64"}) {
    absl::StatusOr<PrecisionConfig> c = ResolvePrecision(name);
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(c.status().message()),
              absl::StrCat("precision: \"", name,
                           "\" (double precision) is not supported: ampd trains in f32 at most; "
                           "use 32-true"));
  }
}

TEST(PrecisionTest, InvalidCombinationsNameTheField) {
  {
    PrecisionConfig c = Resolve("bf16-mixed");
    c.autocast_dtype = DType::kF32;
    ExpectRejected(c, "precision.autocast_dtype");
    c.autocast_dtype = DType::kF64;
    ExpectRejected(c, "precision.autocast_dtype");
  }
  {
    PrecisionConfig c = Resolve("32-true");
    c.master_weights = true;
    ExpectRejected(c, "precision.master_weights");
  }
  {
    PrecisionConfig c = Resolve("32-true");
    c.keep_norms_fp32 = true;
    ExpectRejected(c, "precision.keep_norms_fp32");
  }
  {
    PrecisionConfig c = Resolve("32-true");
    c.param_dtype = DType::kF64;
    ExpectRejected(c, "precision.param_dtype");
  }
  for (DType low : {DType::kF16, DType::kBF16}) {
    PrecisionConfig c = Resolve("16-mixed");
    c.param_dtype = low;
    ExpectRejected(c, "precision.autocast");
  }
  // Autocast off with an f32 autocast dtype is fine: the dtype is unused.
  {
    PrecisionConfig c = Resolve("32-true");
    c.autocast_dtype = DType::kF32;
    EXPECT_TRUE(ValidatePrecision(c).ok());
  }
}

TEST(PrecisionTest, BadLossScalingFieldsArePrefixed) {
  struct Case {
    const char* field;
    void (*mutate)(GradScalerOptions&);
  };
  const Case cases[] = {
      {"init_scale", [](GradScalerOptions& o) { o.init_scale = 0; }},
      {"growth_factor", [](GradScalerOptions& o) { o.growth_factor = 0.9; }},
      {"backoff_factor", [](GradScalerOptions& o) { o.backoff_factor = 1.5; }},
      {"growth_interval", [](GradScalerOptions& o) { o.growth_interval = 0; }},
      {"min_scale", [](GradScalerOptions& o) { o.min_scale = -1.0; }},
      {"max_scale",
       [](GradScalerOptions& o) {
         o.min_scale = 4.0;
         o.max_scale = 2.0;
       }},
  };
  for (const char* mode : {"16-mixed", "O2", "O3"}) {
    for (const Case& k : cases) {
      PrecisionConfig c = Resolve(mode);
      k.mutate(c.loss_scaling);
      ExpectRejected(c, std::string("precision.loss_scaling.") + k.field);
    }
  }
}

TEST(PrecisionTest, ModesDecideTheParameterDtypes) {
  MlpSpec spec;
  spec.input_dim = 8;
  spec.hidden = {6};
  spec.num_classes = 3;
  spec.layer_norm = true;
  struct Expect {
    const char* mode;
    DType linear;
    DType norm;
  };
  for (const Expect& e :
       {Expect{"32-true", DType::kF32, DType::kF32}, Expect{"16-mixed", DType::kF32, DType::kF32},
        Expect{"bf16-mixed", DType::kF32, DType::kF32}, Expect{"16-true", DType::kF16, DType::kF16},
        Expect{"bf16-true", DType::kBF16, DType::kBF16}, Expect{"O2", DType::kF16, DType::kF32},
        Expect{"O3", DType::kF16, DType::kF16}}) {
    SCOPED_TRACE(e.mode);
    absl::StatusOr<std::unique_ptr<Model>> m = BuildModel(spec, Resolve(e.mode), 1);
    ASSERT_TRUE(m.ok()) << m.status();
    int norms = 0;
    for (const Parameter& p : (*m)->parameters()) {
      EXPECT_EQ(p.value.dtype(), p.is_norm ? e.norm : e.linear) << p.name;
      norms += p.is_norm;
    }
    EXPECT_EQ(norms, 2);
  }
}

}  // namespace
}  // namespace ampd::engine
