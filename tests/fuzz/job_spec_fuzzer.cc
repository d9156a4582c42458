// libFuzzer target: arbitrary bytes as a job spec (proto3 JSON) through the
// parser, the validator and the resolver. Build and run with tools/fuzz.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/runner/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ampd::v1::JobSpec> spec =
      ampd::engine::runner::ParseJobSpecJson(json, "fuzz.json");
  if (!spec.ok()) return 0;
  ampd::engine::runner::JobSpecContext context;
  context.data_root = "/nonexistent/ampd-fuzz";
  context.fashion_mnist_dir = "/nonexistent/ampd-fuzz/fashion-mnist";
  // One user profile, so profile lookups exercise both outcomes.
  context.profiles = [](const std::string& name) -> std::optional<ampd::v1::PrecisionConfig> {
    if (name != "fuzz-profile") return std::nullopt;
    return ampd::v1::PrecisionConfig();
  };
  (void)ampd::engine::runner::ValidateJobSpec(*spec, context);
  (void)ampd::engine::runner::ResolveJobSpec(*spec, context);
  (void)ampd::engine::runner::KnownDataShape(spec->data());
  return 0;
}
