// The sampler (engine/generate/sampler.h): greedy at temperature 0, top-k and
// top-p keep exactly the tokens HF's warpers keep, the draws follow the
// softmax, and the options are validated by field.

#include "engine/generate/sampler.h"

#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace ampd::engine::generate {
namespace {

std::map<int32_t, int> Counts(SamplingOptions o, const std::vector<float>& logits, int n) {
  Sampler s(o);
  std::map<int32_t, int> c;
  for (int i = 0; i < n; ++i) ++c[s.Next(logits)];
  return c;
}

TEST(SamplerTest, TemperatureZeroIsTheFirstArgmax) {
  SamplingOptions o;
  o.temperature = 0;
  Sampler s(o);
  EXPECT_EQ(s.Next({0.5f, 3.0f, -1.0f, 3.0f}), 1);
}

TEST(SamplerTest, DrawsFollowTheSoftmax) {
  SamplingOptions o;
  o.seed = 1;
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  const std::map<int32_t, int> c = Counts(o, logits, 20000);
  EXPECT_NEAR(c.at(1) / 20000.0, 0.75, 0.02);
  // Temperature 2 flattens: p1 = sqrt(3) / (1 + sqrt(3)) = 0.634.
  o.temperature = 2;
  EXPECT_NEAR(Counts(o, logits, 20000).at(1) / 20000.0, 0.634, 0.02);
}

TEST(SamplerTest, TopKAndTopPKeepTheHead) {
  const std::vector<float> logits = {1.0f, 4.0f, 2.0f, 3.0f, 0.0f};
  SamplingOptions o;
  o.seed = 3;
  o.top_k = 2;
  std::map<int32_t, int> c = Counts(o, logits, 5000);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.count(1) && c.count(3));
  // Probabilities 0.644, 0.237, 0.087, ...: top_p 0.7 keeps the two largest
  // (the first alone is under 0.7), top_p 0.5 the largest alone.
  o.top_k = 0;
  o.top_p = 0.7;
  c = Counts(o, logits, 5000);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.count(1) && c.count(3));
  o.top_p = 0.5;
  c = Counts(o, logits, 100);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.begin()->first, 1);
  // Ties with the k-th logit stay (HF removes only those below it).
  o.top_p = 1;
  o.top_k = 1;
  EXPECT_EQ(Counts(o, {2.0f, 2.0f, 0.0f}, 2000).size(), 2u);
}

TEST(SamplerTest, OneSeedOneSequence) {
  const std::vector<float> logits(50, 0.0f);
  SamplingOptions o;
  o.seed = 9;
  Sampler a(o), b(o);
  std::vector<int32_t> x, y;
  for (int i = 0; i < 100; ++i) x.push_back(a.Next(logits)), y.push_back(b.Next(logits));
  EXPECT_EQ(x, y);
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingOptions o;
  EXPECT_TRUE(ValidateSampling(o).ok());
  o.temperature = std::nan("");
  EXPECT_EQ(ValidateSampling(o).message().substr(0, 12), "temperature:");
  o = SamplingOptions();
  o.top_k = -1;
  EXPECT_EQ(ValidateSampling(o).message().substr(0, 6), "top_k:");
  o = SamplingOptions();
  o.top_p = 1.5;
  EXPECT_EQ(ValidateSampling(o).message().substr(0, 6), "top_p:");
}

}  // namespace
}  // namespace ampd::engine::generate
