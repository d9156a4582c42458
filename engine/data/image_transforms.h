#ifndef AMPD_ENGINE_DATA_IMAGE_TRANSFORMS_H_
#define AMPD_ENGINE_DATA_IMAGE_TRANSFORMS_H_

// Per-channel normalisation and seeded augmentation of [C, H, W] images,
// torchvision's transforms in torchvision's order: RandomCrop(padding) and
// RandomHorizontalFlip on the raw values, then Normalize, then RandomErasing
// (which erases to 0 in normalised units, its default). An example's
// augmentation depends only on (seed, epoch, row), so a run resumed from a
// checkpoint (the batcher's position) draws the same crops, flips and boxes.

#include <cstdint>
#include <vector>

namespace ampd::engine::data {

struct ImageTransforms {
  // Per channel: x' = (x - mean[c]) / std[c]. Empty: none. One value applies
  // to every channel.
  std::vector<float> mean, std;
  // RandomCrop to the same size from the image zero-padded by this many
  // pixels on every side (0: none).
  int64_t crop_padding = 0;
  bool horizontal_flip = false;  // with probability 0.5
  // RandomErasing's probability (scale (0.02, 0.33), ratio (0.3, 3.3)); 0: none.
  double erasing = 0;

  bool normalizes() const { return !mean.empty(); }
  bool augments() const { return crop_padding > 0 || horizontal_flip || erasing > 0; }
};

// Evaluation: normalises `n` examples of `shape` ([C, H, W]) in place.
void NormalizeExamples(const ImageTransforms& t, const std::vector<int64_t>& shape, float* x,
                       int64_t n);
// Training: one example's augmentation and normalisation, in place.
void TransformTrainingExample(const ImageTransforms& t, const std::vector<int64_t>& shape,
                              uint64_t seed, int64_t epoch, int64_t row, float* x);

}  // namespace ampd::engine::data

#endif  // AMPD_ENGINE_DATA_IMAGE_TRANSFORMS_H_
