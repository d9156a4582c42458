// Generation (engine/generate): the KV cache gives exactly the no-cache
// logits at every step (through the window's slide past block_size), greedy decoding
// equals the argmax path without the cache, one seed gives one text, and a
// stopped generation stops at once.

#include "engine/generate/generator.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ampd::engine::generate {
namespace {

nn::GptSpec Tiny() {
  nn::GptSpec s;
  s.vocab_size = 64;
  s.block_size = 16;
  s.n_layer = 2;
  s.n_head = 2;
  s.n_embd = 32;
  return s;
}

// A model's initial weights (seed 5), by name: what a trained job's file holds.
std::map<std::string, Tensor> Weights(const nn::GptSpec& spec) {
  auto gpt = nn::Gpt::Build(spec, 5);
  std::map<std::string, Tensor> w;
  for (const nn::Parameter& p : (*gpt)->parameters()) w[p.name] = p.value.Detach();
  return w;
}

std::unique_ptr<Generator> Make(const std::string& precision = "32-true") {
  auto p = amp::ResolvePrecision(precision);
  EXPECT_TRUE(p.ok()) << p.status();
  auto g = Generator::Create(Tiny(), *p, Device::kCpu, Weights(Tiny()));
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

std::vector<int32_t> Sample(Generator& g, const std::vector<int32_t>& prompt, GenerateOptions o) {
  std::vector<int32_t> out;
  auto r = g.Generate(prompt, o, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.status();
  return out;
}

// Every step's logits through the cache against the whole context's, while
// the context grows to block_size and then slides (the cache restarts).
TEST(GeneratorTest, TheCacheGivesTheNoCacheLogits) {
  for (const char* precision : {"32-true", "bf16-mixed"}) {
    std::unique_ptr<Generator> g = Make(precision);
    std::vector<int32_t> context = {1, 2, 3, 4, 5};
    nn::GptCache cache;
    double worst = 0;
    for (int step = 0; step < 30; ++step) {
      const std::vector<float> cached = g->NextLogits(context, &cache);
      const std::vector<float> full = g->NextLogits(context, nullptr);
      ASSERT_EQ(cached.size(), 64u);
      for (size_t i = 0; i < full.size(); ++i) {
        worst = std::max(worst, std::abs(double(cached[i]) - full[i]));
      }
      int32_t next =
          static_cast<int32_t>(std::max_element(full.begin(), full.end()) - full.begin());
      context.push_back((next + step) % 64);
      if (context.size() > 16) {
        context.erase(context.begin());
        cache = nn::GptCache();
      }
    }
    // The attention rows are bitwise the whole sequence's (ops/attention_test);
    // the GEMMs' rows are too on an AVX-512 CPU, where oneDNN computes a row
    // the same way whatever the row count (max diff 0 there). Its AVX2
    // kernels (AMD Zen 3, say) take another path for one row than for many,
    // which sums in another order: a few f32 ulps of the logits, no more.
    EXPECT_LE(worst, 1e-6) << precision;
  }
}

TEST(GeneratorTest, GreedyEqualsTheArgmaxPathWithoutTheCache) {
  std::unique_ptr<Generator> g = Make();
  GenerateOptions o;
  o.max_new_tokens = 40;  // past block_size 16: the window slides
  o.sampling.temperature = 0;
  const std::vector<int32_t> prompt = {7, 8, 9};
  const std::vector<int32_t> cached = Sample(*g, prompt, o);
  // The argmax path by hand, with the whole context each time.
  std::vector<int32_t> context = prompt, want;
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> window(context.end() - std::min<size_t>(context.size(), 16),
                                context.end());
    const std::vector<float> logits = g->NextLogits(window, nullptr);
    want.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    context.push_back(want.back());
  }
  EXPECT_EQ(cached, want);
  o.use_cache = false;
  EXPECT_EQ(Sample(*g, prompt, o), want);
}

TEST(GeneratorTest, OneSeedOneText) {
  std::unique_ptr<Generator> g = Make();
  GenerateOptions o;
  o.max_new_tokens = 30;
  o.sampling.seed = 42;
  o.sampling.top_k = 20;
  o.sampling.top_p = 0.95;
  const std::vector<int32_t> a = Sample(*g, {1}, o), b = Sample(*g, {1}, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 30u);
  o.sampling.seed = 43;
  EXPECT_NE(Sample(*g, {1}, o), a);
  // Without the cache the same seed draws the same tokens (the logits agree).
  o.sampling.seed = 42;
  o.use_cache = false;
  EXPECT_EQ(Sample(*g, {1}, o), a);
}

TEST(GeneratorTest, StopsWhenTheCallbackSaysSo) {
  std::unique_ptr<Generator> g = Make();
  GenerateOptions o;
  o.max_new_tokens = 1000;
  int calls = 0;
  auto r = g->Generate({1, 2}, o, [&](int32_t) { return ++calls < 3; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(r->stopped);
}

void ExpectInvalid(const absl::Status& s, const std::string& text) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), text)) << s;
}

TEST(GeneratorTest, BadArgumentsNameTheirField) {
  std::unique_ptr<Generator> g = Make();
  auto run = [&](const std::vector<int32_t>& prompt, GenerateOptions o) {
    return g->Generate(prompt, o, [](int32_t) { return true; }).status();
  };
  GenerateOptions o;
  ExpectInvalid(run({}, o), "prompt:");
  ExpectInvalid(run({64}, o), "token 0 is 64");
  o.max_new_tokens = 0;
  ExpectInvalid(run({1}, o), "max_new_tokens:");
  o = GenerateOptions();
  o.sampling.temperature = -1;
  ExpectInvalid(run({1}, o), "temperature:");
  o = GenerateOptions();
  o.sampling.top_p = 0;
  ExpectInvalid(run({1}, o), "top_p:");
  o = GenerateOptions();
  o.sampling.top_k = -2;
  ExpectInvalid(run({1}, o), "top_k:");
}

}  // namespace
}  // namespace ampd::engine::generate
