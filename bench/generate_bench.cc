// generate_bench: tokens/s of generation on this machine, with and without
// the KV cache, side by side in one run, for the fortunes example's model
// (GPT 4 x 256, block 128, byte-level; random weights: speed does not depend
// on them) and GPT-2 124M's shape. Greedy, one sequence; the prompt is one
// token, so each run grows the context to block_size (past it, both paths
// re-read the whole window every token and run at the same speed).
//
//   bazel run -c opt //bench:generate_bench [-- --tokens=N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "engine/generate/generator.h"

namespace ampd::engine::generate {
namespace {

double TokensPerSecond(Generator& g, int64_t tokens, bool cache) {
  GenerateOptions o;
  o.max_new_tokens = tokens;
  o.sampling.temperature = 0;
  o.use_cache = cache;
  auto r = g.Generate({10}, o, [](int32_t) { return true; });
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
    std::exit(1);
  }
  return r->tokens / r->seconds;
}

int Main(int argc, char** argv) {
  int64_t tokens = 0;  // 0: block_size - 1 (the whole context)
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--tokens=", 9) == 0) tokens = std::atoll(argv[i] + 9);
  }
  struct Case {
    const char* name;
    nn::GptSpec spec;
    const char* precision;
  };
  nn::GptSpec fortunes;  // the defaults: 256 vocab, block 128, 4 x 4 x 256
  nn::GptSpec gpt2;
  gpt2.vocab_size = 50257;
  gpt2.block_size = 1024;
  gpt2.n_layer = 12;
  gpt2.n_head = 12;
  gpt2.n_embd = 768;
  const Case cases[] = {{"fortunes GPT 4x256, block 128", fortunes, "bf16-mixed"},
                        {"fortunes GPT 4x256, block 128", fortunes, "32-true"},
                        {"GPT-2 124M (64 tokens)", gpt2, "bf16-mixed"}};
  std::printf("%-32s %-11s %8s %14s %14s %8s\n", "model", "precision", "tokens", "cache tok/s",
              "no-cache tok/s", "ratio");
  for (const Case& c : cases) {
    auto weights_model = nn::Gpt::Build(c.spec, 1);
    std::map<std::string, Tensor> weights;
    for (const nn::Parameter& p : (*weights_model)->parameters()) weights[p.name] = p.value;
    auto precision = amp::ResolvePrecision(c.precision);
    auto g = Generator::Create(c.spec, *precision, Device::kCpu, weights);
    if (!g.ok()) return 1;
    int64_t n = tokens > 0 ? tokens : c.spec.block_size - 1;
    if (c.spec.block_size > 512 && tokens == 0) n = 64;
    TokensPerSecond(**g, 8, true);  // warm-up
    const double with = TokensPerSecond(**g, n, true);
    const double without = TokensPerSecond(**g, n, false);
    std::printf("%-32s %-11s %8lld %14.1f %14.1f %7.2fx\n", c.name, c.precision, (long long)n,
                with, without, with / without);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace ampd::engine::generate

int main(int argc, char** argv) { return ampd::engine::generate::Main(argc, argv); }
