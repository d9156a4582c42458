#ifndef AMPD_ENGINE_GENERATE_SAMPLER_H_
#define AMPD_ENGINE_GENERATE_SAMPLER_H_

// Picks the next token from a row of logits, as Hugging Face's generate()
// with do_sample does: temperature, then top-k, then top-p (nucleus), then a
// draw from the softmax of what is left. Temperature 0 is greedy (the first
// largest logit, torch.argmax's choice). The draws come from a seeded
// splitmix64 (core/rng.h), so one seed gives the same tokens on every
// machine.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/rng.h"

namespace ampd::engine::generate {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // 1: every token
  uint64_t seed = 0;
};

// INVALID_ARGUMENT naming the field ("temperature: must be >= 0, got -1").
absl::Status ValidateSampling(const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
  int32_t Next(const std::vector<float>& logits);

 private:
  SamplingOptions options_;
  core::Rng rng_;
  std::vector<int32_t> order_;  // scratch
  std::vector<double> weights_;
};

}  // namespace ampd::engine::generate

#endif  // AMPD_ENGINE_GENERATE_SAMPLER_H_
