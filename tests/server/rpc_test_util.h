#ifndef AMPD_TESTS_SERVER_RPC_TEST_UTIL_H_
#define AMPD_TESTS_SERVER_RPC_TEST_UTIL_H_

// Small helpers shared by the ampd integration tests that use the generated
// ampd.v1 stubs.

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "ampd/v1/training_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace ampd::testing {

// Parses a JobSpec from protobuf JSON (a gtest failure if it does not parse).
ampd::v1::JobSpec ParseSpec(const std::string& json);

// `json` (an object) with "priority": `priority` added at its top level.
std::string WithPriority(const std::string& json, int priority);

// The field names of every google.rpc.BadRequest violation in `status`.
std::vector<std::string> ViolatedFields(const grpc::Status& status);

// Creates a job (a gtest failure on error).
ampd::v1::Job CreateJob(ampd::v1::TrainingService::Stub* stub, const std::string& json);
grpc::Status TryCreateJob(ampd::v1::TrainingService::Stub* stub, const std::string& json,
                          ampd::v1::Job* job);
ampd::v1::Job GetJob(ampd::v1::TrainingService::Stub* stub, const std::string& name);
void CancelJob(ampd::v1::TrainingService::Stub* stub, const std::string& name);

// Polls until the job is in one of `states` (a gtest failure on timeout;
// returns the last job seen either way).
ampd::v1::Job WaitForState(ampd::v1::TrainingService::Stub* stub, const std::string& name,
                           const std::set<ampd::v1::JobState>& states,
                           std::chrono::milliseconds timeout = std::chrono::seconds(180));

// Nanoseconds since the epoch of a job's RUNNING transition (-1 if none).
int64_t RunningSinceNanos(const ampd::v1::Job& job);

}  // namespace ampd::testing

#endif  // AMPD_TESTS_SERVER_RPC_TEST_UTIL_H_
