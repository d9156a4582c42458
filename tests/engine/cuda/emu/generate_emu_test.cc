// Generation on the CUDA backend (run here on the CPU emulator of CUDA): the
// weights move to the device, the cached attention and the GEMMs run there,
// and each step's logits match the CPU's; greedy text with the cache equals
// the device's own no-cache path and the CPU's text.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/generate/generator.h"
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

std::unique_ptr<Generator> Make(Device device) {
  auto gpt = nn::Gpt::Build(Tiny(), 5);
  std::map<std::string, Tensor> w;
  for (const nn::Parameter& p : (*gpt)->parameters()) w[p.name] = p.value;
  auto g = Generator::Create(Tiny(), *amp::ResolvePrecision("32-true"), device, w);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

std::vector<int32_t> Greedy(Generator& g, bool cache) {
  GenerateOptions o;
  o.max_new_tokens = 24;  // past block_size: the window slides
  o.sampling.temperature = 0;
  o.use_cache = cache;
  std::vector<int32_t> out;
  EXPECT_TRUE(g.Generate({3, 4}, o, [&](int32_t t) {
                 out.push_back(t);
                 return true;
               }).ok());
  return out;
}

TEST(GenerateEmuTest, TheDeviceGeneratesWhatTheCpuDoes) {
  ASSERT_TRUE(backend::BackendFor(Device::kCuda).ok());
  std::unique_ptr<Generator> cpu = Make(Device::kCpu), gpu = Make(Device::kCuda);
  std::vector<int32_t> context = {1, 2, 3};
  nn::GptCache cache;
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> c = cpu->NextLogits(context, nullptr);
    const std::vector<float> g = gpu->NextLogits(context, &cache);
    ASSERT_EQ(c.size(), g.size());
    for (size_t i = 0; i < c.size(); ++i) {
      ASSERT_NEAR(g[i], c[i], 1e-4 * (1 + std::abs(c[i]))) << "step " << step << " logit " << i;
    }
    context.push_back(static_cast<int32_t>(step * 7 % 64));
  }
  const std::vector<int32_t> device_cached = Greedy(*gpu, true);
  EXPECT_EQ(device_cached, Greedy(*gpu, false));
  EXPECT_EQ(device_cached, Greedy(*cpu, true));
}

}  // namespace
}  // namespace ampd::engine::generate
