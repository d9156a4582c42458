// gpt_logits WEIGHTS V T L H C B TOKENS OUT: ampd's logits [B*T, V] for the
// comma-separated TOKENS (B sequences of T) from a weights file in any layout
// nn/weights_file.h reads (the GPT's sizes given), written to OUT as the one
// tensor "logits" (safetensors, f32). For gpt_hf_layout_test.py.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/io/safetensors.h"
#include "engine/nn/gpt.h"
#include "engine/nn/weights_file.h"

namespace ampd::engine::nn {
namespace {

int Main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: gpt_logits WEIGHTS V T L H C B TOKENS OUT\n");
    return 2;
  }
  GptSpec s;
  s.vocab_size = std::atoll(argv[2]);
  s.block_size = std::atoll(argv[3]);
  s.n_layer = std::atoll(argv[4]);
  s.n_head = std::atoll(argv[5]);
  s.n_embd = std::atoll(argv[6]);
  const int64_t batch = std::atoll(argv[7]);
  std::vector<int32_t> tokens;
  for (absl::string_view t : absl::StrSplit(argv[8], ',')) {
    int32_t v = 0;
    if (!absl::SimpleAtoi(t, &v)) return 2;
    tokens.push_back(v);
  }
  auto file = io::ReadSafetensors(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  auto weights = ImportWeights(s, *file, argv[1]);
  if (!weights.ok()) {
    std::fprintf(stderr, "%s\n", std::string(weights.status().message()).c_str());
    return 1;
  }
  auto gpt = Gpt::Build(s, 0);
  if (!gpt.ok()) return 1;
  for (Parameter& p : (*gpt)->parameters()) p.value.CopyFrom(weights->at(p.name));
  const Tensor logits =
      (*gpt)->Logits(tokens, batch, static_cast<int64_t>(tokens.size()) / batch, false);
  return io::WriteSafetensors(argv[9], {{"logits", logits}}, {}).ok() ? 0 : 1;
}

}  // namespace
}  // namespace ampd::engine::nn

int main(int argc, char** argv) { return ampd::engine::nn::Main(argc, argv); }
