#ifndef AMPD_ENGINE_RUNNER_SPEC_JSON_H_
#define AMPD_ENGINE_RUNNER_SPEC_JSON_H_

// Job spec files: ampd.v1.JobSpec in protobuf's JSON mapping, plus the
// aliases users bring from other tools. Only protobuf and the proto: ampctl
// links it without the engine.

#include <string>

#include "absl/status/statusor.h"
#include "ampd/v1/job_spec.pb.h"

namespace ampd::engine::runner {

// Parses proto3 JSON; errors name the source and what protobuf's parser said.
// Aliases: "optimizer": "adamw8bit" (bitsandbytes' name) is {"adamw":
// {"stateBits": 8}}; "adamw", "sgd" and "sgd8bit" likewise (any case).
absl::StatusOr<ampd::v1::JobSpec> ParseJobSpecJson(const std::string& json,
                                                   const std::string& source_name);

}  // namespace ampd::engine::runner

#endif  // AMPD_ENGINE_RUNNER_SPEC_JSON_H_
