#ifndef AMPD_ENGINE_GENERATE_GENERATOR_H_
#define AMPD_ENGINE_GENERATE_GENERATOR_H_

// Text generation from a GPT's weights: the prompt, then one token at a time
// (sampler.h), with a KV cache (nn::GptCache) so that each new token costs one
// row through the model instead of the whole context.
//
// The context is nanoGPT's: the model sees the last block_size tokens. Until
// the context fills, each token extends the cache; once it is full, the
// window slides and every position changes (they are absolute), so each
// further token re-reads the last block_size tokens from an empty cache, as
// the no-cache path does every time.
//
// A job's model generates on its job's device in its precision's autocast
// dtype (an FP8 job in bf16: its FP8 scales are training state).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/core/tensor.h"
#include "engine/generate/sampler.h"
#include "engine/nn/gpt.h"

namespace ampd::engine::generate {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  SamplingOptions sampling;
  bool use_cache = true;  // false: the whole context each token (the reference)
};

struct GenerateResult {
  int64_t tokens = 0;    // generated (fewer than asked when on_token stopped it)
  double seconds = 0;    // from the first forward to the last token
  bool stopped = false;  // on_token returned false
};

class Generator {
 public:
  // The model on `device` with `weights` (by parameter name, in the model's
  // layout, any floating dtype: each is cast to its parameter's dtype).
  static absl::StatusOr<std::unique_ptr<Generator>> Create(
      const nn::GptSpec& spec, const amp::PrecisionConfig& precision, Device device,
      const std::map<std::string, Tensor>& weights);

  // Samples up to max_new_tokens after `prompt` (non-empty, ids < vocab;
  // longer than block_size: its last block_size tokens), calling `on_token`
  // with each as it is chosen; on_token returning false stops at once.
  // INVALID_ARGUMENT naming the field for bad options or prompt.
  absl::StatusOr<GenerateResult> Generate(const std::vector<int32_t>& prompt,
                                          const GenerateOptions& options,
                                          const std::function<bool(int32_t)>& on_token);

  // The next-token logits after `context`, through a cache extended by
  // `context`'s tokens after the cache's own (Extend) or, with no cache, the
  // whole context's last row (Logits). Exposed for tests.
  std::vector<float> NextLogits(const std::vector<int32_t>& context, nn::GptCache* cache);

  const nn::GptSpec& spec() const { return model_->spec(); }

 private:
  Generator(std::unique_ptr<nn::Gpt> model, const amp::PrecisionConfig& precision)
      : model_(std::move(model)), precision_(precision) {}
  std::unique_ptr<nn::Gpt> model_;
  amp::PrecisionConfig precision_;
};

}  // namespace ampd::engine::generate

#endif  // AMPD_ENGINE_GENERATE_GENERATOR_H_
