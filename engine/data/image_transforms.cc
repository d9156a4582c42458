#include "engine/data/image_transforms.h"

#include <algorithm>
#include <cmath>

namespace ampd::engine::data {

namespace {

// A counter-based generator: the draws of (seed, epoch, row) are the same
// whatever came before them.
class ExampleRng {
 public:
  ExampleRng(uint64_t seed, int64_t epoch, int64_t row)
      : state_(Mix(Mix(seed ^ 0x7a3bc1d5e9f20461ull) ^ static_cast<uint64_t>(epoch)) ^
               static_cast<uint64_t>(row)) {}
  uint64_t Next() { return Mix(state_ += 0x9e3779b97f4a7c15ull); }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t Below(int64_t n) { return static_cast<int64_t>(Uniform() * static_cast<double>(n)); }

 private:
  static uint64_t Mix(uint64_t z) {  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

float ChannelValue(const std::vector<float>& v, int64_t c) {
  return v.size() == 1 ? v[0] : v[static_cast<size_t>(c)];
}

void NormalizeOne(const ImageTransforms& t, int64_t channels, int64_t plane, float* x) {
  if (!t.normalizes()) return;
  for (int64_t c = 0; c < channels; ++c) {
    const float m = ChannelValue(t.mean, c), inv = 1.0f / ChannelValue(t.std, c);
    for (int64_t i = 0; i < plane; ++i) x[c * plane + i] = (x[c * plane + i] - m) * inv;
  }
}

}  // namespace

void NormalizeExamples(const ImageTransforms& t, const std::vector<int64_t>& shape, float* x,
                       int64_t n) {
  if (!t.normalizes()) return;
  const int64_t plane = shape[1] * shape[2], size = shape[0] * plane;
  for (int64_t e = 0; e < n; ++e) NormalizeOne(t, shape[0], plane, x + e * size);
}

void TransformTrainingExample(const ImageTransforms& t, const std::vector<int64_t>& shape,
                              uint64_t seed, int64_t epoch, int64_t row, float* x) {
  const int64_t C = shape[0], H = shape[1], W = shape[2], plane = H * W;
  ExampleRng rng(seed, epoch, row);
  if (t.crop_padding > 0) {
    // The crop's top-left corner in the padded image: [0, 2p] each way.
    const int64_t p = t.crop_padding;
    const int64_t top = rng.Below(2 * p + 1) - p, left = rng.Below(2 * p + 1) - p;
    std::vector<float> src(x, x + C * plane);
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t i = 0; i < H; ++i) {
        for (int64_t j = 0; j < W; ++j) {
          const int64_t si = i + top, sj = j + left;
          x[c * plane + i * W + j] =
              si >= 0 && si < H && sj >= 0 && sj < W ? src[c * plane + si * W + sj] : 0.0f;
        }
      }
    }
  }
  if (t.horizontal_flip && rng.Uniform() < 0.5) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t i = 0; i < H; ++i)
        std::reverse(x + c * plane + i * W, x + c * plane + (i + 1) * W);
    }
  }
  NormalizeOne(t, C, plane, x);
  if (t.erasing > 0 && rng.Uniform() < t.erasing) {
    // torchvision's RandomErasing: up to 10 tries for a box of 2-33 % of the
    // area with aspect ratio in [0.3, 3.3] (log-uniform) that fits.
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double area = static_cast<double>(plane) * (0.02 + rng.Uniform() * (0.33 - 0.02));
      const double log_lo = std::log(0.3), log_hi = std::log(3.3);
      const double aspect = std::exp(log_lo + rng.Uniform() * (log_hi - log_lo));
      const int64_t h = std::llround(std::sqrt(area * aspect));
      const int64_t w = std::llround(std::sqrt(area / aspect));
      if (h < 1 || w < 1 || h >= H || w >= W) continue;
      const int64_t i0 = rng.Below(H - h + 1), j0 = rng.Below(W - w + 1);
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t i = i0; i < i0 + h; ++i) {
          std::fill(x + c * plane + i * W + j0, x + c * plane + i * W + j0 + w, 0.0f);
        }
      }
      break;
    }
  }
}

}  // namespace ampd::engine::data
