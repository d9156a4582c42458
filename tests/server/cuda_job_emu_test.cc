// A `device: cuda` job end to end through a real ampd process built against
// the CUDA emulator (tests/engine/cuda/emu): the device is listed in
// GetCapabilities, the job trains on the CUDA backend's device path
// (kernels, cuBLASLt GEMMs, on-device AMP) to completion with the same loss
// as the same job on the CPU, and the server logs the device memory it used.
// Nothing here says anything about a real GPU (see the emulator's README).

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"
#include "tests/server/rpc_test_util.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;

// TinyJobJson's job (hidden 16, evaluated every 10 steps) with a fixed seed.
std::string JobJson(const std::string& precision, const std::string& device, int steps = 40) {
  return TinyJobJson(steps, precision, /*seed=*/3, device);
}

class CudaJobEmuTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(std::vector<std::string> flags) {
    UseAmpdBinary("tests/server/ampd_emu");
    server_ = std::make_unique<AmpdProcess>(std::move(flags));
    ASSERT_TRUE(server_->ok()) << server_->log();
    training_ = v1::TrainingService::NewStub(server_->channel());
    precision_ = v1::PrecisionService::NewStub(server_->channel());
  }

  v1::Job Submit(const std::string& json) { return CreateJob(training_.get(), json); }

  v1::Job WaitForEnd(const v1::Job& job) {
    return WaitForState(training_.get(), job.name(), {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED},
                        std::chrono::seconds(240));
  }

  v1::Job RunToEnd(const std::string& json) { return WaitForEnd(Submit(json)); }

  std::unique_ptr<AmpdProcess> server_;
  std::unique_ptr<v1::TrainingService::Stub> training_;
  std::unique_ptr<v1::PrecisionService::Stub> precision_;
};

TEST_F(CudaJobEmuTest, TheEmulatedDeviceIsListed) {
  grpc::ClientContext ctx;
  v1::Capabilities caps;
  ASSERT_TRUE(precision_->GetCapabilities(&ctx, v1::GetCapabilitiesRequest(), &caps).ok());
  const v1::DeviceInfo* gpu = nullptr;
  for (const v1::DeviceInfo& d : caps.devices()) {
    if (d.kind() == v1::DEVICE_CUDA) gpu = &d;
  }
  ASSERT_NE(gpu, nullptr) << caps.DebugString();
  EXPECT_NE(gpu->name().find("ampd CUDA emulator"), std::string::npos) << gpu->name();
  EXPECT_EQ(gpu->compute_capability(), "9.0");
  EXPECT_TRUE(gpu->bf16_native());
  EXPECT_GT(gpu->memory_bytes(), 0);
  EXPECT_TRUE(caps.unavailable().empty()) << caps.DebugString();
}

TEST_F(CudaJobEmuTest, ACudaJobTrainsToCompletionLikeTheSameJobOnTheCpu) {
  for (const std::string precision : {"bf16-mixed", "16-mixed"}) {
    const v1::Job gpu = RunToEnd(JobJson(precision, "DEVICE_CUDA"));
    const v1::Job cpu = RunToEnd(JobJson(precision, "DEVICE_CPU"));
    ASSERT_EQ(gpu.state(), v1::SUCCEEDED) << gpu.failure_reason() << "\n" << server_->log();
    ASSERT_EQ(cpu.state(), v1::SUCCEEDED) << cpu.failure_reason();
    EXPECT_EQ(gpu.progress().step(), 40);
    // Same model, data, seed and numerics up to summation order.
    EXPECT_NEAR(gpu.latest_step().loss(), cpu.latest_step().loss(),
                0.05 * std::max(1.0, cpu.latest_step().loss()))
        << precision;
    EXPECT_NEAR(gpu.latest_eval().accuracy(), cpu.latest_eval().accuracy(), 0.05) << precision;
    EXPECT_EQ(gpu.latest_step().loss_scale(), cpu.latest_step().loss_scale()) << precision;
  }
  // The jobs really ran on the device: the allocator served them.
  const std::string log = server_->log();
  const size_t line = log.find("device memory after the job");
  ASSERT_NE(line, std::string::npos) << log;
  const size_t peak = log.find("\"peak_in_use_bytes\":\"", line);
  ASSERT_NE(peak, std::string::npos) << log;
  EXPECT_GT(std::stoll(log.substr(peak + 21)), 0) << log.substr(line, 300);
}

// Two CUDA jobs at once (two workers, so two threads, two streams, one
// allocator): each gets exactly the result it gets alone.
TEST_F(CudaJobEmuTest, ConcurrentCudaJobsDoNotDisturbEachOther) {
  const v1::Job alone = RunToEnd(JobJson("bf16-mixed", "DEVICE_CUDA", 150));
  ASSERT_EQ(alone.state(), v1::SUCCEEDED) << alone.failure_reason();
  server_.reset();
  Start({"--cpu_workers=2"});
  const v1::Job a = Submit(JobJson("bf16-mixed", "DEVICE_CUDA", 150));
  const v1::Job b = Submit(JobJson("bf16-mixed", "DEVICE_CUDA", 150));
  const v1::Job done_a = WaitForEnd(a), done_b = WaitForEnd(b);
  ASSERT_EQ(done_a.state(), v1::SUCCEEDED) << done_a.failure_reason() << "\n" << server_->log();
  ASSERT_EQ(done_b.state(), v1::SUCCEEDED) << done_b.failure_reason();
  // They overlapped in time.
  EXPECT_LT(done_a.start_time().seconds() * 1000000000LL + done_a.start_time().nanos(),
            done_b.end_time().seconds() * 1000000000LL + done_b.end_time().nanos());
  EXPECT_LT(done_b.start_time().seconds() * 1000000000LL + done_b.start_time().nanos(),
            done_a.end_time().seconds() * 1000000000LL + done_a.end_time().nanos());
  EXPECT_EQ(done_a.latest_step().loss(), alone.latest_step().loss());
  EXPECT_EQ(done_b.latest_step().loss(), alone.latest_step().loss());
  EXPECT_EQ(done_a.latest_eval().accuracy(), alone.latest_eval().accuracy());
  EXPECT_EQ(done_b.latest_eval().accuracy(), alone.latest_eval().accuracy());
}

// The per-step losses of a job's history.
std::map<int64_t, double> Losses(v1::TrainingService::Stub* stub, const std::string& name) {
  grpc::ClientContext ctx;
  v1::StreamMetricsRequest req;
  req.set_name(name);
  req.set_history_only(true);
  auto reader = stub->StreamMetrics(&ctx, req);
  std::map<int64_t, double> losses;
  v1::MetricsEvent e;
  while (reader->Read(&e)) {
    if (e.has_step_record()) losses[e.step_record().step()] = e.step_record().loss();
  }
  EXPECT_TRUE(reader->Finish().ok());
  return losses;
}

// A data-parallel CUDA job: ampd runs rank 0 and starts rank 1 as a worker
// process on the second device (CUDA_VISIBLE_DEVICES), the ranks reducing
// over NCCL (here the emulator's two "devices" and its NCCL stand-in, each
// process with its own device memory). It trains as one worker with the
// same global batch does, to rounding; a job wanting more devices than the
// server has is refused at once.
TEST_F(CudaJobEmuTest, ACudaJobOfTwoWorkersTrainsOnTwoDevicesOverNccl) {
  setenv("AMPD_CUDA_EMU_DEVICES", "2", 1);
  server_.reset();
  Start({"--cpu_workers=2"});
  unsetenv("AMPD_CUDA_EMU_DEVICES");
  auto job = [](int workers, const std::string& precision) {
    std::string json = JobJson(precision, "DEVICE_CUDA", 60);
    json.replace(json.rfind('}'), 1,
                 ", \"resources\": {\"workers\": " + std::to_string(workers) + "}}");
    return json;
  };
  for (const std::string precision : {"32-true", "bf16-mixed"}) {
    SCOPED_TRACE(precision);
    const v1::Job one = RunToEnd(job(1, precision));
    const v1::Job two = RunToEnd(job(2, precision));
    ASSERT_EQ(one.state(), v1::SUCCEEDED) << one.failure_reason();
    ASSERT_EQ(two.state(), v1::SUCCEEDED) << two.failure_reason() << "\n" << server_->log();
    const std::map<int64_t, double> l1 = Losses(training_.get(), one.name());
    const std::map<int64_t, double> l2 = Losses(training_.get(), two.name());
    ASSERT_EQ(l2.size(), 60u);
    double worst = 0;
    for (const auto& [step, loss] : l1) {
      worst = std::max(worst, std::abs(l2.at(step) - loss) / std::abs(loss));
    }
    EXPECT_LT(worst, precision == "32-true" ? 1e-3 : 2e-2);
    const std::string log = server_->data_dir() + "/jobs/" + two.id() + "/workers/worker-1.log";
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("worker 1 of 2"), std::string::npos) << log << ": " << text;
    EXPECT_NE(text.find("on CUDA device 1 over NCCL"), std::string::npos) << text;
  }
  grpc::ClientContext ctx;
  v1::CreateJobRequest req;
  *req.mutable_spec() = ParseSpec(job(4, "32-true"));
  v1::Job refused;
  const grpc::Status s = training_->CreateJob(&ctx, req, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("2 CUDA device(s)"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace ampd::testing
