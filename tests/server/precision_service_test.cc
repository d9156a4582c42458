// PrecisionService over loopback against a real ampd process: capabilities,
// precision plans, and user-defined profiles used by jobs.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "engine/cpu/bf16_gemm_route.h"
#include "engine/cpu/capabilities.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"
#include "tests/server/rpc_test_util.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;

const std::vector<std::string> kBuiltins = {
    "32-true", "16-mixed", "bf16-mixed", "16-true",    "bf16-true",   "O0",
    "O1",      "O2",       "O3",         "fp8-hybrid", "fp8-current", "transformer-engine-float16"};

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

template <typename Request>
Request FromJson(const std::string& json) {
  Request r;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &r).ok()) << json;
  return r;
}

// A tiny model on the same synthetic data TinyJobJson uses.
const char kExplainModel[] = R"({
  "model": {"mlp": {"hidden": [16]}},
  "data": {"synthetic": {"numExamples": 512, "featureDim": 8, "numClasses": 3, "seed": 7}},
  "batchSize": 32})";

class PrecisionServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<AmpdProcess>();
    ASSERT_TRUE(server_->ok()) << server_->log();
    precision_ = v1::PrecisionService::NewStub(server_->channel());
    training_ = v1::TrainingService::NewStub(server_->channel());
  }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }

  grpc::Status Explain(const std::string& json, v1::ExplainPrecisionResponse* response) {
    auto ctx = Ctx();
    return precision_->ExplainPrecision(ctx.get(), FromJson<v1::ExplainPrecisionRequest>(json),
                                        response);
  }

  grpc::Status CreateProfile(const std::string& id, const std::string& config_json,
                             v1::PrecisionProfile* out = nullptr) {
    v1::CreateProfileRequest req;
    req.set_profile_id(id);
    *req.mutable_profile()->mutable_config() = FromJson<v1::PrecisionConfig>(config_json);
    req.mutable_profile()->set_description("test profile " + id);
    v1::PrecisionProfile ignored;
    auto ctx = Ctx();
    return precision_->CreateProfile(ctx.get(), req, out ? out : &ignored);
  }

  grpc::Status GetProfile(const std::string& name, v1::PrecisionProfile* out) {
    v1::GetProfileRequest req;
    req.set_name(name);
    auto ctx = Ctx();
    return precision_->GetProfile(ctx.get(), req, out);
  }

  grpc::Status DeleteProfile(const std::string& name) {
    v1::DeleteProfileRequest req;
    req.set_name(name);
    google::protobuf::Empty empty;
    auto ctx = Ctx();
    return precision_->DeleteProfile(ctx.get(), req, &empty);
  }

  std::vector<v1::PrecisionProfile> ListProfiles() {
    v1::ListProfilesResponse resp;
    auto ctx = Ctx();
    grpc::Status s = precision_->ListProfiles(ctx.get(), v1::ListProfilesRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return std::vector<v1::PrecisionProfile>(resp.profiles().begin(), resp.profiles().end());
  }

  std::unique_ptr<AmpdProcess> server_;
  std::unique_ptr<v1::PrecisionService::Stub> precision_;
  std::unique_ptr<v1::TrainingService::Stub> training_;
};

const v1::PrecisionExplanation* FindMode(const v1::ExplainPrecisionResponse& r,
                                         const std::string& mode) {
  for (const auto& e : r.explanations()) {
    if (e.precision() == mode) return &e;
  }
  return nullptr;
}

TEST_F(PrecisionServiceTest, CapabilitiesListTheCpuAndWhyCudaIsMissing) {
  v1::Capabilities caps;
  auto ctx = Ctx();
  grpc::Status s = precision_->GetCapabilities(ctx.get(), v1::GetCapabilitiesRequest(), &caps);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(caps.server_version().empty());

  const engine::cpu::CpuCapabilities& cpu = engine::cpu::ProbeCpu();
  const v1::DeviceInfo* cpu_info = nullptr;
  bool cuda_listed = false;
  for (const auto& d : caps.devices()) {
    if (d.kind() == v1::DEVICE_CPU) cpu_info = &d;
    if (d.kind() == v1::DEVICE_CUDA) cuda_listed = true;
  }
  ASSERT_NE(cpu_info, nullptr) << caps.DebugString();
  EXPECT_EQ(cpu_info->name(), cpu.name);
  EXPECT_EQ(cpu_info->bf16_native(), cpu.avx512_bf16);
  EXPECT_TRUE(cpu_info->compute_capability().empty());
  // MFU's denominator: the bf16 GEMM rate measured when the server started
  // (a 2-core machine does tens to hundreds of GFLOP/s).
  EXPECT_GT(cpu_info->peak_bf16_flops(), 1e9) << cpu_info->DebugString();
  EXPECT_LT(cpu_info->peak_bf16_flops(), 1e14) << cpu_info->DebugString();
  const std::set<std::string> modes(cpu_info->precision_modes().begin(),
                                    cpu_info->precision_modes().end());
  for (const char* m : {"32-true", "16-mixed", "16-true", "O0", "O1", "O2", "O3"}) {
    EXPECT_TRUE(modes.count(m)) << "CPU lacks " << m << ": " << cpu_info->DebugString();
  }
  // bf16 modes run on every CPU; without oneDNN's bf16 matmul (no AVX-512)
  // the GEMMs are widened to f32, and the notes say so.
  for (const char* m : {"bf16-mixed", "bf16-true"}) {
    EXPECT_TRUE(modes.count(m)) << m << ": " << cpu_info->DebugString();
  }
  EXPECT_EQ(Contains(cpu_info->notes(), "no bf16 matmul without AVX-512"), !cpu.bf16_matmul)
      << cpu_info->notes();
  // Which way bf16 GEMMs run here, and why (widened where oneDNN's bf16
  // matmul is missing or measured slower).
  const engine::cpu::Bf16GemmChoice& route = engine::cpu::ChosenBf16GemmRoute();
  EXPECT_TRUE(Contains(cpu_info->notes(), route.why)) << cpu_info->notes();
  EXPECT_EQ(Contains(cpu_info->notes(), "widened to f32"),
            route.route == engine::cpu::Bf16GemmRoute::kWidened)
      << cpu_info->notes();
  for (const std::string& m : modes) {
    EXPECT_TRUE(std::find(kBuiltins.begin(), kBuiltins.end(), m) != kBuiltins.end()) << m;
  }
  // The FP8 modes run on the CPU, emulated, and it says so.
  for (const char* m : {"fp8-hybrid", "fp8-current", "transformer-engine-float16"}) {
    EXPECT_TRUE(modes.count(m)) << m;
  }
  EXPECT_FALSE(cpu_info->fp8_native());
  EXPECT_TRUE(Contains(cpu_info->notes(), "FP8 modes run emulated")) << cpu_info->notes();

  if (!cuda_listed) {
    // No GPU here: the absence of CUDA is explained.
    bool names_cuda = false;
    for (const std::string& why : caps.unavailable()) names_cuda |= Contains(why, "CUDA");
    EXPECT_TRUE(names_cuda) << caps.DebugString();
  }
}

TEST_F(PrecisionServiceTest, ExplainEveryBuiltinModeWhenPrecisionIsUnset) {
  v1::ExplainPrecisionResponse resp;
  grpc::Status s = Explain(kExplainModel, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::vector<std::string> names;
  for (const auto& e : resp.explanations()) names.push_back(e.precision());
  // Every built-in mode but the FP8 ones: an MLP has no block linears.
  EXPECT_EQ(names, std::vector<std::string>(kBuiltins.begin(), kBuiltins.end() - 3));

  const int64_t params = 8 * 16 + 16 + 16 * 3 + 3;
  for (const auto& e : resp.explanations()) {
    EXPECT_EQ(e.parameter_count(), params) << e.precision();
    EXPECT_FALSE(e.ops().empty()) << e.precision();
    const v1::MemoryEstimate& m = e.memory();
    EXPECT_EQ(m.total_bytes(), m.weights_bytes() + m.master_weights_bytes() + m.gradients_bytes() +
                                   m.optimizer_state_bytes() + m.activation_bytes())
        << e.precision();
    EXPECT_GT(m.weights_bytes(), 0) << e.precision();
  }

  const v1::PrecisionExplanation* fp32 = FindMode(resp, "32-true");
  const v1::PrecisionExplanation* bf16 = FindMode(resp, "bf16-mixed");
  const v1::PrecisionExplanation* o2 = FindMode(resp, "O2");
  ASSERT_TRUE(fp32 && bf16 && o2);

  // 32-true: every op reads, computes and writes f32.
  for (const v1::OpPlan& op : fp32->ops()) {
    EXPECT_EQ(op.compute_dtype(), v1::DTYPE_F32) << op.op() << " " << op.layer();
    EXPECT_EQ(op.output_dtype(), v1::DTYPE_F32) << op.op() << " " << op.layer();
    for (int d : op.input_dtypes()) EXPECT_EQ(d, v1::DTYPE_F32) << op.op() << " " << op.layer();
  }
  EXPECT_EQ(fp32->memory().master_weights_bytes(), 0);
  EXPECT_EQ(fp32->memory().weights_bytes(), params * 4);

  // bf16-mixed: linears compute in bf16 (autocast's lower-precision list),
  // the loss in f32.
  int linears = 0, losses = 0;
  for (const v1::OpPlan& op : bf16->ops()) {
    if (op.op() == "linear") {
      ++linears;
      EXPECT_EQ(op.compute_dtype(), v1::DTYPE_BF16) << op.layer();
      EXPECT_EQ(op.policy(), v1::CAST_POLICY_LOWER_PRECISION) << op.layer();
    } else if (op.op() == "cross_entropy") {
      ++losses;
      EXPECT_EQ(op.compute_dtype(), v1::DTYPE_F32);
      EXPECT_EQ(op.policy(), v1::CAST_POLICY_FP32);
    }
  }
  EXPECT_EQ(linears, 2);
  EXPECT_EQ(losses, 1);
  EXPECT_EQ(bf16->ops(bf16->ops_size() - 1).op(), "cross_entropy");
  EXPECT_LT(bf16->memory().activation_bytes(), fp32->memory().activation_bytes());

  // O2: f16 weights with f32 master copies.
  EXPECT_GT(o2->memory().master_weights_bytes(), 0);
  EXPECT_EQ(o2->memory().master_weights_bytes(), params * 4);
  EXPECT_EQ(o2->memory().weights_bytes(), params * 2);
}

// A GPT's plan under fp8-hybrid marks each FP8 GEMM and its operands'
// formats; unset precision explains the FP8 modes too.
TEST_F(PrecisionServiceTest, ExplainMarksTheFp8GemmsOfAGpt) {
  const std::string gpt = R"({"model": {"gpt": {"blockSize": "16", "nLayer": "2", "nHead": "2",
      "nEmbd": "32"}}, "data": {"builtin": "fortunes"}, "batchSize": 4)";
  v1::ExplainPrecisionResponse resp;
  grpc::Status s = Explain(gpt + R"(, "precision": {"profile": "transformer-engine"}})", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.explanations_size(), 1);
  EXPECT_EQ(resp.explanations(0).precision(), "fp8-hybrid");
  int fp8 = 0;
  for (const v1::OpPlan& op : resp.explanations(0).ops()) {
    if (op.op() != "fp8_linear") {
      EXPECT_FALSE(op.has_fp8()) << op.op() << " " << op.layer();
      continue;
    }
    ++fp8;
    EXPECT_EQ(op.fp8().input(), "e4m3");
    EXPECT_EQ(op.fp8().weight(), "e4m3");
    EXPECT_EQ(op.fp8().grad_output(), "e5m2");
    EXPECT_EQ(op.fp8().scaling(), "delayed");
    EXPECT_EQ(op.compute_dtype(), v1::DTYPE_BF16);
  }
  EXPECT_EQ(fp8, 8);  // 4 linears in each of 2 blocks
  resp.Clear();
  ASSERT_TRUE(Explain(gpt + "}", &resp).ok());
  std::vector<std::string> names;
  for (const auto& e : resp.explanations()) names.push_back(e.precision());
  EXPECT_EQ(names, kBuiltins);
}

TEST_F(PrecisionServiceTest, ExplainOneModeWhenPrecisionIsSet) {
  std::string json = kExplainModel;
  json.insert(json.find_last_of('}'), R"(, "precision": {"profile": "bf16-mixed"})");
  v1::ExplainPrecisionResponse resp;
  grpc::Status s = Explain(json, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.explanations_size(), 1);
  EXPECT_EQ(resp.explanations(0).precision(), "bf16-mixed");
  EXPECT_EQ(resp.explanations(0).ops(0).op(), "linear");
  EXPECT_EQ(resp.explanations(0).ops(0).compute_dtype(), v1::DTYPE_BF16);

  // A custom config: one plan, with the fp32 layer honoured.
  json = kExplainModel;
  json.insert(json.find_last_of('}'),
              R"(, "precision": {"custom": {"base": "bf16-mixed", "fp32Layers": ["head"]}})");
  resp.Clear();
  s = Explain(json, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.explanations_size(), 1);
  bool saw_head = false;
  for (const v1::OpPlan& op : resp.explanations(0).ops()) {
    if (op.op() != "linear") continue;
    if (op.layer() == "head") {
      saw_head = true;
      EXPECT_EQ(op.compute_dtype(), v1::DTYPE_F32);
    } else {
      EXPECT_EQ(op.compute_dtype(), v1::DTYPE_BF16) << op.layer();
    }
  }
  EXPECT_TRUE(saw_head) << resp.DebugString();
}

TEST_F(PrecisionServiceTest, InvalidExplainInputNamesTheFields) {
  v1::ExplainPrecisionResponse resp;
  grpc::Status s = Explain(R"({"model": {"mlp": {"hidden": [8, 0]}},
      "data": {"synthetic": {"featureDim": 8, "numClasses": 3}}, "optimizer": {"lr": -1}})",
                           &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<std::string> fields = ViolatedFields(s);
  std::set<std::string> got(fields.begin(), fields.end());
  EXPECT_EQ(got, (std::set<std::string>{"model.mlp.hidden[1]", "optimizer.lr"}))
      << s.error_message();

  s = Explain(R"({"model": {"mlp": {"hidden": [8]}}, "batchSize": -3})", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"batch_size"}) << s.error_message();

  s = Explain(R"({"model": {"mlp": {"hidden": [8]}},
      "data": {"synthetic": {"featureDim": 8, "numClasses": 3}},
      "precision": {"profile": "fp8-mixed"}})",
              &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"precision.profile"}) << s.error_message();
}

TEST_F(PrecisionServiceTest, ListProfilesHasTheBuiltinsFirst) {
  std::vector<v1::PrecisionProfile> profiles = ListProfiles();
  ASSERT_EQ(profiles.size(), kBuiltins.size());
  for (size_t i = 0; i < kBuiltins.size(); ++i) {
    EXPECT_EQ(profiles[i].name(), "profiles/" + kBuiltins[i]);
    EXPECT_TRUE(profiles[i].builtin()) << profiles[i].name();
    EXPECT_FALSE(profiles[i].description().empty()) << profiles[i].name();
  }
  v1::PrecisionProfile p;
  grpc::Status s = GetProfile("profiles/bf16-mixed", &p);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(p.builtin());
  EXPECT_EQ(p.config().base(), "bf16-mixed");
  s = GetProfile("profiles/no-such-profile", &p);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(PrecisionServiceTest, ProfileLifecycleAndErrors) {
  v1::PrecisionProfile created;
  grpc::Status s =
      CreateProfile("my-bf16", R"({"base": "bf16-mixed", "fp32Layers": ["head"]})", &created);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(created.name(), "profiles/my-bf16");
  EXPECT_FALSE(created.builtin());
  EXPECT_EQ(created.config().base(), "bf16-mixed");

  for (const std::string& name : {std::string("profiles/my-bf16"), std::string("my-bf16")}) {
    v1::PrecisionProfile got;
    s = GetProfile(name, &got);
    ASSERT_TRUE(s.ok()) << name << ": " << s.error_message();
    EXPECT_EQ(got.name(), "profiles/my-bf16");
    EXPECT_FALSE(got.builtin());
    ASSERT_EQ(got.config().fp32_layers_size(), 1);
    EXPECT_EQ(got.config().fp32_layers(0), "head");
  }
  std::vector<v1::PrecisionProfile> listed = ListProfiles();
  ASSERT_EQ(listed.size(), kBuiltins.size() + 1);
  EXPECT_EQ(listed.back().name(), "profiles/my-bf16");
  EXPECT_FALSE(listed.back().builtin());

  // Built-in names (canonical, alias, any case) cannot be taken.
  for (const char* id : {"bf16-mixed", "32-true", "bf16", "fp32"}) {
    s = CreateProfile(id, R"({"base": "bf16-mixed"})");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << id;
    EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"profile_id"}) << id;
  }
  // Bad ids.
  for (const char* id : {"", "My_Profile", "1abc", "has space"}) {
    s = CreateProfile(id, R"({"base": "bf16-mixed"})");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << id;
    EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"profile_id"}) << id;
  }
  s = CreateProfile(std::string(64, 'a'), R"({"base": "bf16-mixed"})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Invalid configs name the field under profile.config.
  s = CreateProfile("bad-growth", R"({"base": "16-mixed", "lossScaling": {"growthFactor": 0.5}})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s),
            std::vector<std::string>{"profile.config.loss_scaling.growth_factor"})
      << s.error_message();
  s = CreateProfile("bad-base", R"({"base": "fp8-mixed"})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"profile.config.base"})
      << s.error_message();
  // Nothing invalid was stored.
  EXPECT_EQ(ListProfiles().size(), kBuiltins.size() + 1);

  // Duplicates.
  s = CreateProfile("my-bf16", R"({"base": "16-mixed"})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  v1::PrecisionProfile unchanged;
  ASSERT_TRUE(GetProfile("profiles/my-bf16", &unchanged).ok());
  EXPECT_EQ(unchanged.config().base(), "bf16-mixed");

  // Deletion: built-ins refuse, unknown names are not found.
  s = DeleteProfile("profiles/bf16-mixed");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  s = DeleteProfile("profiles/O2");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  s = DeleteProfile("profiles/never-created");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(ListProfiles().size(), kBuiltins.size() + 1);

  // The user profile shapes explanations too.
  std::string explain = kExplainModel;
  explain.insert(explain.find_last_of('}'), R"(, "precision": {"profile": "my-bf16"})");
  v1::ExplainPrecisionResponse resp;
  s = Explain(explain, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.explanations_size(), 1);
  EXPECT_EQ(resp.explanations(0).precision(), "my-bf16");
  for (const v1::OpPlan& op : resp.explanations(0).ops()) {
    if (op.op() == "linear") {
      EXPECT_EQ(op.compute_dtype(), op.layer() == "head" ? v1::DTYPE_F32 : v1::DTYPE_BF16)
          << op.layer();
    }
  }

  s = DeleteProfile("profiles/my-bf16");
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ListProfiles().size(), kBuiltins.size());
  s = GetProfile("profiles/my-bf16", &unchanged);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  s = DeleteProfile("profiles/my-bf16");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(PrecisionServiceTest, JobsRunWithAUserProfileUntilItIsDeleted) {
  grpc::Status s = CreateProfile("my-bf16", R"({"base": "bf16-mixed", "fp32Layers": ["head"]})");
  ASSERT_TRUE(s.ok()) << s.error_message();

  v1::Job job = CreateJob(training_.get(), TinyJobJson(20, "my-bf16"));
  ASSERT_FALSE(job.name().empty());
  EXPECT_EQ(job.precision(), "my-bf16");
  v1::Job done =
      WaitForState(training_.get(), job.name(), {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED});
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << "\n" << server_->log();
  EXPECT_EQ(done.progress().step(), 20);
  EXPECT_EQ(done.precision(), "my-bf16");

  s = DeleteProfile("profiles/my-bf16");
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::Job refused;
  s = TryCreateJob(training_.get(), TinyJobJson(20, "my-bf16"), &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ViolatedFields(s), std::vector<std::string>{"spec.precision.profile"})
      << s.error_message();
  EXPECT_TRUE(Contains(s.error_message(), "my-bf16")) << s.error_message();
  // The job that ran keeps its record.
  EXPECT_EQ(GetJob(training_.get(), job.name()).precision(), "my-bf16");
}

}  // namespace
}  // namespace ampd::testing
