#include "engine/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/core/error_subject.h"

namespace ampd::engine::generate {

using core::FieldError;

absl::Status ValidateSampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || std::isinf(o.temperature)) {
    return FieldError("temperature", absl::StrCat("must be a finite number >= 0 (0: greedy), got ",
                                                  o.temperature));
  }
  if (o.top_k < 0) {
    return FieldError("top_k", absl::StrCat("must be >= 0 (0: no limit), got ", o.top_k));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return FieldError("top_p", absl::StrCat("must be in (0, 1] (1: no limit), got ", o.top_p));
  }
  return absl::OkStatus();
}

int32_t Sampler::Next(const std::vector<float>& logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  if (options_.temperature == 0) return static_cast<int32_t>(best);
  // The candidates: largest logit first (ties by index) when a filter needs
  // the order, else by index (the same distribution, no sort).
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  if ((options_.top_k > 0 && options_.top_k < n) || options_.top_p < 1) {
    std::stable_sort(order_.begin(), order_.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  }
  int64_t keep = n;
  if (options_.top_k > 0 && options_.top_k < n) {
    // Every token tied with the k-th stays (HF removes only those below it).
    keep = options_.top_k;
    while (keep < n && logits[order_[keep]] == logits[order_[keep - 1]]) ++keep;
  }
  const double max = logits[best], t = options_.temperature;
  weights_.resize(keep);
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) {
    total += weights_[i] = std::exp((static_cast<double>(logits[order_[i]]) - max) / t);
  }
  if (options_.top_p < 1) {
    // The smallest head of the order whose probability reaches top_p (at
    // least one token).
    double cumulative = 0;
    int64_t nucleus = 0;
    while (nucleus < keep) {
      cumulative += weights_[nucleus++] / total;
      if (cumulative >= options_.top_p) break;
    }
    keep = nucleus;
    total = 0;
    for (int64_t i = 0; i < keep; ++i) total += weights_[i];
  }
  const double u = static_cast<double>(rng_.NextU64() >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += weights_[i];
    if (u < acc) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace ampd::engine::generate
