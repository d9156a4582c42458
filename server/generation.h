#ifndef AMPD_SERVER_GENERATION_H_
#define AMPD_SERVER_GENERATION_H_

// What TrainingService.Generate needs besides the engine's generator: the
// model and weights a request samples from, and a UTF-8 decoder for
// byte-level tokens streamed a few at a time.

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ampd/v1/training_service.pb.h"
#include "engine/generate/generator.h"
#include "engine/runner/job_spec.h"

namespace ampd::server {

// A job's model, ready to generate.
struct GenerationModel {
  std::unique_ptr<engine::generate::Generator> generator;
  std::string artifact;     // what was loaded ("model.safetensors", "checkpoints/...")
  bool byte_level = false;  // token ids are bytes (text in, text out)
};

// The job's model on its device with the weights of `artifact` (empty: the
// final weights, else the newest checkpoint). FAILED_PRECONDITION for a job
// that is not a GPT or has no weights yet, INVALID_ARGUMENT (about
// `artifact`) for a name no job's artifact has, NOT_FOUND (the artifact's
// name) for one this job does not have.
absl::StatusOr<GenerationModel> LoadGenerationModel(const ampd::v1::Job& job,
                                                    const std::string& artifact,
                                                    const std::string& data_root,
                                                    const engine::runner::JobSpecContext& context);

// Bytes in, whole UTF-8 characters out: an incomplete character waits for its
// next bytes; a byte that cannot start or continue one becomes U+FFFD.
class Utf8Decoder {
 public:
  // The text that `byte` completes (often empty, or one character).
  std::string Push(uint8_t byte);
  // What is left at the end (an incomplete character: U+FFFD).
  std::string Flush();

 private:
  std::string pending_;
  int need_ = 0;                   // continuation bytes the pending character still needs
  uint8_t lo_ = 0x80, hi_ = 0xBF;  // the range of the next one
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_GENERATION_H_
