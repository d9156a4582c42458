#!/usr/bin/env python3
"""PyTorch eager on bench/gpt_bench.cc's GPT step, for the ratio (CPU), and
on gpu_bench's GPT-2 124M step (--device=cuda, run by tools/gpu_bundle).

nanoGPT's model (pre-LayerNorm blocks, F.scaled_dot_product_attention with
is_causal=True, GELU tanh, tied LM head) at the same size, batch and sequence
length, AdamW, cross entropy (with --dropout: nanoGPT's dropout after the
embeddings, on the attention probabilities through SDPA's dropout_p, and
after each block's projections); 32-true in f32, bf16-mixed under
torch.autocast(device, dtype=torch.bfloat16) over f32 weights. Prints
"RESULT torch_gpt step_ms=... tokens_per_s=...", or a SKIPPED line when torch
(or its CUDA) is missing (exit 0 either way).
"""

import argparse
import statistics
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--precision", default="bf16-mixed", choices=["32-true", "bf16-mixed"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--block", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--embd", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dropout", type=float, default=0.0)
    a = p.parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        print("SKIPPED torch_gpt_bench: PyTorch is not importable here")
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED torch_gpt_bench: torch.cuda is not available")
        return 0

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(a.embd)
            self.c_attn = nn.Linear(a.embd, 3 * a.embd)
            self.c_proj = nn.Linear(a.embd, a.embd)
            self.ln_2 = nn.LayerNorm(a.embd)
            self.c_fc = nn.Linear(a.embd, 4 * a.embd)
            self.mlp_proj = nn.Linear(4 * a.embd, a.embd)
            self.drop = nn.Dropout(a.dropout)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            shape = (B, T, a.heads, C // a.heads)
            q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=a.dropout if self.training else 0.0)
            x = x + self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))
            return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(a.vocab, a.embd)
            self.wpe = nn.Embedding(a.block, a.embd)
            self.h = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln_f = nn.LayerNorm(a.embd)
            self.drop = nn.Dropout(a.dropout)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))

    torch.manual_seed(0)
    model = Gpt().to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, a.vocab, (a.batch, a.block + 1), generator=gen).to(a.device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16-mixed"):
            loss = model(data[:, :-1], data[:, 1:])
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {a.precision}")
    step_s = statistics.median(times)
    print(f"RESULT torch_gpt step_ms={1e3 * step_s:.2f} "
          f"tokens_per_s={a.batch * a.block / step_s:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
