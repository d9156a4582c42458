// Trains a tiny GPT for the PyTorch parity test (gpt_torch_parity_test.py)
// and writes what it needs to compare: the initial weights (HF GPT-2 names,
// f32), every step's token windows, every step's loss, and the gradients of
// step 1 (before the update).
//   gpt_parity_dump OUT_DIR PRECISION     (32-true or bf16-mixed)
// 20 AdamW steps (lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight decay),
// batch 4 x 16 tokens of a fixed pseudo-random byte sequence; bf16-mixed is
// bf16 autocast over f32 weights, as torch.autocast("cpu", bfloat16).

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/data/token_sequence.h"
#include "engine/data/token_windows.h"
#include "engine/io/safetensors.h"
#include "engine/nn/gpt.h"
#include "engine/ops/autocast.h"
#include "engine/optim/optimizer.h"

namespace ampd::engine {
namespace {

std::vector<std::pair<std::string, Tensor>> Named(std::vector<nn::Parameter>& params, bool grads) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (nn::Parameter& p : params) out.push_back({p.name, grads ? p.value.grad() : p.value});
  return out;
}

int Main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gpt_parity_dump OUT_DIR 32-true|bf16-mixed\n");
    return 2;
  }
  const std::string out = argv[1], precision = argv[2];
  const bool bf16 = precision == "bf16-mixed";
  nn::GptSpec spec;
  spec.vocab_size = 64;
  spec.block_size = 16;
  spec.n_layer = 2;
  spec.n_head = 2;
  spec.n_embd = 32;
  std::unique_ptr<nn::Gpt> gpt = *nn::Gpt::Build(spec, 1);
  if (absl::Status s =
          io::WriteSafetensors(out + "/init.safetensors", Named(gpt->parameters(), false), {});
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  // A sequence with structure to learn: byte i depends on the two before it.
  std::vector<uint16_t> seq(4096);
  seq[0] = 1;
  seq[1] = 2;
  for (size_t i = 2; i < seq.size(); ++i) seq[i] = (seq[i - 1] * 7 + seq[i - 2] * 3 + i % 5) % 64;
  const data::TokenSequence tokens = data::TokenSequence::FromU16(seq, "parity");
  data::TokenWindows windows = *data::TokenWindows::Create({&tokens}, spec.block_size, 9);
  optim::OptimizerSpec o;
  o.lr = 1e-3;
  optim::Optimizer opt(o, &gpt->parameters(), false);
  std::ofstream steps(out + "/steps.txt");
  for (int step = 1; step <= 20; ++step) {
    const data::TokenBatch b = windows.Next(4);
    opt.ZeroGrad();
    Tensor loss;
    {
      ops::AutocastScope autocast(bf16, DType::kBF16);
      loss = gpt->Loss(b.inputs, b.targets, b.batch, b.block, true);
    }
    autograd::Backward(loss);
    if (step == 1) {
      if (absl::Status s = io::WriteSafetensors(out + "/grads_step1.safetensors",
                                                Named(gpt->parameters(), true), {});
          !s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    opt.CollectGradients();
    opt.Step(o.lr);
    // One line per step: the loss, then the inputs and targets.
    steps.precision(17);
    steps << loss.Item();
    for (int32_t t : b.inputs) steps << " " << t;
    for (int32_t t : b.targets) steps << " " << t;
    steps << "\n";
  }
  return steps.good() ? 0 : 1;
}

}  // namespace
}  // namespace ampd::engine

int main(int argc, char** argv) { return ampd::engine::Main(argc, argv); }
