// Normalisation and seeded augmentation of images: torchvision's semantics
// (crop from the zero-padded image, flip, normalise, erase to 0 after), and
// draws that depend only on (seed, epoch, example).
#include "engine/data/image_transforms.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::engine::data {
namespace {

// Pixel values that say where they came from: c*100 + i*10 + j + 1.
std::vector<float> Image(int64_t C, int64_t H, int64_t W) {
  std::vector<float> x(C * H * W);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) x[(c * H + i) * W + j] = c * 100 + i * 10 + j + 1;
  return x;
}

TEST(ImageTransformsTest, NormalizesPerChannel) {
  ImageTransforms t;
  t.mean = {1, 101};
  t.std = {2, 4};
  std::vector<float> x = Image(2, 2, 2);
  NormalizeExamples(t, {2, 2, 2}, x.data(), 1);
  EXPECT_EQ(x, (std::vector<float>{0, 0.5f, 5, 5.5f, 0, 0.25f, 2.5f, 2.75f}));
}

TEST(ImageTransformsTest, CropsFromTheZeroPaddedImageAsOneShift) {
  ImageTransforms t;
  t.crop_padding = 2;
  const std::vector<int64_t> shape = {2, 5, 6};
  int shifted = 0;
  for (int64_t row = 0; row < 50; ++row) {
    std::vector<float> x = Image(2, 5, 6);
    TransformTrainingExample(t, shape, 7, 0, row, x.data());
    // Every pixel is either padding (0) or the source pixel at one offset
    // (dy, dx) in [-2, 2], the same for both channels.
    int dy = 99, dx = 99;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 6; ++j) {
          const float v = x[(c * 5 + i) * 6 + j];
          if (v == 0) continue;
          const int si = static_cast<int>(v - c * 100 - 1) / 10,
                    sj = static_cast<int>(v - c * 100 - 1) % 10;
          if (dy == 99) dy = si - i, dx = sj - j;
          ASSERT_EQ(si - i, dy);
          ASSERT_EQ(sj - j, dx);
        }
    ASSERT_LE(std::abs(dy), 2);
    ASSERT_LE(std::abs(dx), 2);
    shifted += dy != 0 || dx != 0;
  }
  EXPECT_GT(shifted, 30);  // 24 of 25 offsets move the image
}

TEST(ImageTransformsTest, FlipsAboutHalfTheExamplesHorizontally) {
  ImageTransforms t;
  t.horizontal_flip = true;
  int flipped = 0;
  for (int64_t row = 0; row < 400; ++row) {
    std::vector<float> x = Image(1, 3, 4);
    TransformTrainingExample(t, {1, 3, 4}, 1, 2, row, x.data());
    if (x == Image(1, 3, 4)) continue;
    EXPECT_EQ(x, (std::vector<float>{4, 3, 2, 1, 14, 13, 12, 11, 24, 23, 22, 21}));
    ++flipped;
  }
  EXPECT_GT(flipped, 160);
  EXPECT_LT(flipped, 240);
}

TEST(ImageTransformsTest, ErasesABoxToZeroAfterNormalizing) {
  ImageTransforms t;
  t.mean = {0.5f};
  t.std = {0.25f};
  t.erasing = 1.0;
  for (int64_t row = 0; row < 100; ++row) {
    std::vector<float> x(3 * 16 * 16, 1.0f);  // normalised: 2
    TransformTrainingExample(t, {3, 16, 16}, 3, 0, row, x.data());
    int zeros = 0;
    for (float v : x) {
      ASSERT_TRUE(v == 0.0f || v == 2.0f) << v;
      zeros += v == 0.0f;
    }
    // One box on every channel, 2-33 % of the area (after rounding its sides).
    ASSERT_EQ(zeros % 3, 0);
    EXPECT_GE(zeros / 3, 1);
    EXPECT_LE(zeros / 3, 0.45 * 256);
  }
}

TEST(ImageTransformsTest, DrawsDependOnlyOnSeedEpochAndExample) {
  ImageTransforms t;
  t.crop_padding = 3;
  t.horizontal_flip = true;
  t.erasing = 0.5;
  auto run = [&](uint64_t seed, int64_t epoch, int64_t row) {
    std::vector<float> x = Image(1, 12, 12);
    TransformTrainingExample(t, {1, 12, 12}, seed, epoch, row, x.data());
    return x;
  };
  EXPECT_EQ(run(1, 2, 3), run(1, 2, 3));
  EXPECT_NE(run(1, 2, 3), run(1, 2, 4));
  EXPECT_NE(run(1, 2, 3), run(1, 3, 3));
  EXPECT_NE(run(1, 2, 3), run(2, 2, 3));
}

}  // namespace
}  // namespace ampd::engine::data
