// An op with no kernel on the job's device is refused when the job is
// created, over gRPC: FAILED_PRECONDITION with a google.rpc.PreconditionFailure
// on spec.device naming the op and the device, and nothing is queued. The
// server (ampd built against the CUDA emulator, with dropout's kernel
// registered for the CPU only) runs the same job on the CPU, and a CUDA job
// without dropout.

#include <chrono>
#include <memory>
#include <string>

#include "ampd/v1/training_service.grpc.pb.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"
#include "tests/server/rpc_test_util.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;

std::string JobJson(const std::string& device, double dropout) {
  return R"({"model": {"mlp": {"hidden": [16], "dropout": )" + std::to_string(dropout) +
         R"(}},
    "data": {"synthetic": {"numExamples": 256, "featureDim": 8, "numClasses": 3,
                           "numTestExamples": 64, "seed": 7}},
    "training": {"steps": 5, "batchSize": 32, "seed": 1},
    "device": ")" +
         device + "\"}";
}

TEST(MissingKernelEmuTest, AJobWhoseOpHasNoCudaKernelIsRefusedAtCreation) {
  UseAmpdBinary("tests/server/ampd_emu_cpu_only_dropout");
  AmpdProcess server;
  ASSERT_TRUE(server.ok()) << server.log();
  auto training = v1::TrainingService::NewStub(server.channel());

  v1::Job job;
  const grpc::Status s = TryCreateJob(training.get(), JobJson("DEVICE_CUDA", 0.25), &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_EQ(s.error_message(), "spec.device: op dropout has no CUDA kernel (cuda backend)");
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(s.error_details()));
  google::rpc::PreconditionFailure failure;
  ASSERT_EQ(details.details_size(), 1);
  ASSERT_TRUE(details.details(0).UnpackTo(&failure));
  ASSERT_EQ(failure.violations_size(), 1);
  EXPECT_EQ(failure.violations(0).subject(), "spec.device");
  EXPECT_EQ(failure.violations(0).description(), "op dropout has no CUDA kernel (cuda backend)");

  // Nothing was queued, and the server goes on: the same job on the CPU, and
  // a CUDA job without dropout, run.
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(training->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  for (const auto& [device, dropout] :
       {std::pair<std::string, double>{"DEVICE_CPU", 0.25}, {"DEVICE_CUDA", 0.0}}) {
    const v1::Job ran =
        WaitForState(training.get(), CreateJob(training.get(), JobJson(device, dropout)).name(),
                     {v1::SUCCEEDED, v1::FAILED}, std::chrono::seconds(120));
    EXPECT_EQ(ran.state(), v1::SUCCEEDED) << device << ": " << ran.failure_reason();
  }
}

}  // namespace
}  // namespace ampd::testing
