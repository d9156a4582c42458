// A synthetic classification set that is identical bit for bit on every
// platform: the generator is written here (std:: distributions differ between
// standard libraries), and everything up to the final float conversion is
// integer arithmetic, so neither libm nor FMA contraction can change a label.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/data/dataset.h"

namespace ampd::engine::data {
namespace {

// 8 GiB of features: far beyond any test or demo set. Also bounds the teacher's
// integer dot products (see Label) well inside int64.
constexpr int64_t kMaxElements = int64_t{1} << 31;

// Features are multiples of 1/4096, so a teacher over their integer numerators
// is exactly linear in the floats a model sees.
constexpr int kFractionBits = 12;
constexpr float kQuantum = 1.0f / (1 << kFractionBits);
constexpr int64_t kWeightScale = 32767;

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256**: small state, long period, well-tested output.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    // SplitMix64 spreads nearby seeds (0, 1, 2...) over the whole state and
    // never yields the all-zero state.
    for (uint64_t& word : s_) word = SplitMix64(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// A standard normal draw in units of 2^-kFractionBits, rounded to an integer.
// The sum of twelve uniforms has mean 0 and variance 1 and is close to
// Gaussian (tails cut at 6 sigma); unlike Box-Muller it needs no log or cos,
// whose last bits vary between math libraries.
int64_t NormalQuantized(Xoshiro256& rng) {
  int64_t sum = 0;  // of twelve 32-bit uniforms
  for (int i = 0; i < 6; ++i) {
    const uint64_t r = rng.Next();
    sum += static_cast<int64_t>(r >> 32) + static_cast<int64_t>(r & 0xffffffffULL);
  }
  const int64_t centered = sum - 6 * int64_t{0xffffffff};  // in units of 2^-32
  constexpr int kShift = 32 - kFractionBits;
  // Round half up; written for non-negatives so no shift of a negative occurs.
  const int64_t biased = centered + (int64_t{1} << (kShift - 1));
  return biased >= 0 ? biased >> kShift : -((-biased + (int64_t{1} << kShift) - 1) >> kShift);
}

absl::Status CheckPositive(const char* field, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("SyntheticSpec.", field, " must be > 0, got ", value));
}

absl::Status CheckSize(const char* what, int64_t a, int64_t b) {
  if (a <= kMaxElements / b) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("SyntheticSpec: ", what, " = ", a, " * ", b,
                                                 " exceeds the limit of ", kMaxElements));
}

}  // namespace

absl::StatusOr<Dataset> MakeSyntheticDataset(const SyntheticSpec& spec) {
  absl::Status status = CheckPositive("num_examples", spec.num_examples);
  if (status.ok()) status = CheckPositive("feature_dim", spec.feature_dim);
  if (status.ok()) status = CheckPositive("num_classes", spec.num_classes);
  // Only now are the divisors in CheckSize known to be positive.
  if (status.ok()) {
    status = CheckSize("num_examples * feature_dim", spec.num_examples, spec.feature_dim);
  }
  if (status.ok()) {
    status = CheckSize("num_classes * feature_dim", spec.num_classes, spec.feature_dim);
  }
  if (!status.ok()) return status;
  const int64_t n = spec.num_examples;
  const int64_t d = spec.feature_dim;
  const int k = spec.num_classes;
  Xoshiro256 rng(spec.seed);

  // The teacher comes first from the stream, so it depends only on (seed,
  // feature_dim, num_classes) and a smaller set is a prefix of a larger one.
  // Rows share one norm: a short row could never win the argmax in low
  // dimensions and its class would be missing.
  std::vector<int64_t> teacher(static_cast<size_t>(k * d));
  for (int c = 0; c < k; ++c) {
    int64_t* row = &teacher[static_cast<size_t>(c * d)];
    int64_t norm2 = 0;  // |w| < 2^15 per entry, d <= 2^31: fits
    for (int64_t j = 0; j < d; ++j) {
      row[j] = NormalQuantized(rng);
      norm2 += row[j] * row[j];
    }
    if (norm2 == 0) continue;
    // sqrt and / are correctly rounded in IEEE 754, so this is portable.
    const double norm = std::sqrt(static_cast<double>(norm2));
    for (int64_t j = 0; j < d; ++j) {
      row[j] = std::llround(static_cast<double>(row[j] * kWeightScale) / norm);
    }
  }

  Dataset dataset;
  dataset.num_examples = n;
  dataset.feature_dim = d;
  dataset.num_classes = k;
  dataset.features.resize(static_cast<size_t>(n * d));
  dataset.labels.resize(static_cast<size_t>(n));
  std::vector<int64_t> x(static_cast<size_t>(d));
  for (int64_t i = 0; i < n; ++i) {
    float* out = &dataset.features[static_cast<size_t>(i * d)];
    for (int64_t j = 0; j < d; ++j) {
      x[j] = NormalQuantized(rng);
      out[j] = static_cast<float>(x[j]) * kQuantum;  // exact: |x| < 2^15
    }
    // Each product is < 2^30 and d <= 2^31, so the sum stays below 2^61.
    int best = 0;
    int64_t best_logit = 0;
    for (int c = 0; c < k; ++c) {
      const int64_t* row = &teacher[static_cast<size_t>(c * d)];
      int64_t logit = 0;
      for (int64_t j = 0; j < d; ++j) logit += row[j] * x[j];
      if (c == 0 || logit > best_logit) {
        best = c;
        best_logit = logit;
      }
    }
    dataset.labels[static_cast<size_t>(i)] = best;
  }
  return dataset;
}

}  // namespace ampd::engine::data
