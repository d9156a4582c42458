#include "engine/generate/generator.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/autograd/autograd.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/cast.h"
#include "engine/core/error_subject.h"
#include "engine/ops/autocast.h"

namespace ampd::engine::generate {

using autograd::NoGradGuard;
using backend::CastKernel;
using backend::Kernel;
using core::FieldError;
using nn::Gpt;
using nn::GptCache;
using nn::GptSpec;
using ops::AutocastScope;

namespace {

// The last row of a [rows, vocab] tensor, on the host.
std::vector<float> LastRow(const Tensor& logits) {
  const Tensor host = logits.device() == Device::kCpu ? logits : logits.To(Device::kCpu);
  const int64_t rows = host.dim(0);
  return host.Rows(rows - 1, rows).ToFloats();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(
    const GptSpec& spec, const amp::PrecisionConfig& precision, Device device,
    const std::map<std::string, Tensor>& weights) {
  absl::StatusOr<std::unique_ptr<Gpt>> model =
      Gpt::Build(spec, /*seed=*/0, precision.param_dtype, precision.keep_norms_fp32);
  if (!model.ok()) return model.status();
  for (nn::Parameter& p : (*model)->parameters()) {
    auto it = weights.find(p.name);
    if (it == weights.end() || it->second.shape() != p.value.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the weights have no tensor ", p.name, " of the model's shape"));
    }
    Tensor value = it->second.dtype() == p.value.dtype()
                       ? it->second.Clone()
                       : Kernel<CastKernel>(Device::kCpu)(it->second, p.value.dtype());
    if (device != Device::kCpu) value = value.To(device);
    value.set_name(p.name);
    p.value = value;  // no gradient: generation only reads them
  }
  amp::PrecisionConfig region = precision;
  region.fp8 = false;  // the block linears in the autocast dtype
  return std::unique_ptr<Generator>(new Generator(*std::move(model), region));
}

std::vector<float> Generator::NextLogits(const std::vector<int32_t>& context, GptCache* cache) {
  NoGradGuard no_grad;
  AutocastScope region(amp::AutocastRegion(precision_));
  if (cache == nullptr) {
    const int64_t n = static_cast<int64_t>(context.size());
    return LastRow(model_->Logits(context, 1, n, /*training=*/false));
  }
  const std::vector<int32_t> fresh(context.begin() + cache->length, context.end());
  return LastRow(model_->Extend(fresh, 1, static_cast<int64_t>(fresh.size()), cache));
}

absl::StatusOr<GenerateResult> Generator::Generate(const std::vector<int32_t>& prompt,
                                                   const GenerateOptions& options,
                                                   const std::function<bool(int32_t)>& on_token) {
  const GptSpec& s = model_->spec();
  if (absl::Status st = ValidateSampling(options.sampling); !st.ok()) return st;
  if (options.max_new_tokens < 1) {
    return FieldError("max_new_tokens", absl::StrCat("must be >= 1, got ", options.max_new_tokens));
  }
  if (prompt.empty()) return FieldError("prompt", "must have at least one token");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= s.vocab_size) {
      return FieldError("prompt",
                        absl::StrCat("token ", i, " is ", prompt[i],
                                     ", outside the model's vocabulary [0, ", s.vocab_size, ")"));
    }
  }
  Sampler sampler(options.sampling);
  // The context window: the last block_size tokens.
  std::vector<int32_t> window(
      prompt.end() - std::min<int64_t>(static_cast<int64_t>(prompt.size()), s.block_size),
      prompt.end());
  GptCache cache;
  GenerateResult result;
  const auto start = std::chrono::steady_clock::now();
  while (result.tokens < options.max_new_tokens) {
    const std::vector<float> logits = NextLogits(window, options.use_cache ? &cache : nullptr);
    const int32_t token = sampler.Next(logits);
    ++result.tokens;
    if (!on_token(token)) {
      result.stopped = true;
      break;
    }
    window.push_back(token);
    if (static_cast<int64_t>(window.size()) > s.block_size) {
      // The window slides: every position moves, so the cache starts over.
      window.erase(window.begin());
      cache = GptCache();
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace ampd::engine::generate
