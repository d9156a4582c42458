#!/usr/bin/env python3
"""ampd's GPT against PyTorch eager: same weights, same windows, same losses.

Runs gpt_parity_dump (argv[1]) for 32-true and bf16-mixed, loads the initial
weights it wrote into nanoGPT's model written here in PyTorch (HF GPT-2
parameter names; nn.Linear's [out, in] layout, as ampd stores them), replays
its 20 steps' token windows with AdamW (lr 1e-3, no weight decay), and
compares every step's loss (1e-5 relative in 32-true, 2e-2 in bf16-mixed)
and step 1's gradient of every tensor (norm-wise, same tolerances).
Exit 0 on success; prints "SKIPPED ..." and exits 3 when torch is missing.
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile


def read_safetensors(path, torch):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        begin, end = e["data_offsets"]
        buf = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(e["shape"]).clone()
    return out


def main():
    dump = os.path.abspath(sys.argv[1])
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("SKIPPED gpt_torch_parity_test: PyTorch is not importable by " + sys.executable)
        return 3
    torch.manual_seed(0)
    torch.set_num_threads(2)
    V, T, L, H, C = 64, 16, 2, 2, 32
    failures = []
    for precision, tol in (("32-true", 1e-5), ("bf16-mixed", 2e-2)):
        out = tempfile.mkdtemp()
        subprocess.run([dump, out, precision], check=True)
        w = read_safetensors(os.path.join(out, "init.safetensors"), torch)
        want_grads = read_safetensors(os.path.join(out, "grads_step1.safetensors"), torch)
        steps = [l.split() for l in open(os.path.join(out, "steps.txt"))]
        params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
        opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.0)

        def loss_of(idx, targets):
            p = params
            x = p["wte.weight"][idx] + p["wpe.weight"][torch.arange(T)]
            for l in range(L):
                h = f"h.{l}."
                a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5)
                q, k, v = F.linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"]).split(C, 2)
                B = idx.shape[0]
                q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                y = y.transpose(1, 2).contiguous().view(B, T, C)
                x = x + F.linear(y, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"])
                m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
                m = F.gelu(F.linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]),
                           approximate="tanh")
                x = x + F.linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"])
            x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
            logits = F.linear(x, p["wte.weight"])
            return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1))

        for i, fields in enumerate(steps):
            want = float(fields[0])
            toks = [int(t) for t in fields[1:]]
            n = len(toks) // 2
            idx = torch.tensor(toks[:n]).view(-1, T)
            targets = torch.tensor(toks[n:]).view(-1, T)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                loss = loss_of(idx, targets)
            loss.backward()
            got = loss.item()
            rel = abs(got - want) / abs(got)
            print(f"{precision} step {i + 1}: ampd {want:.7f} torch {got:.7f} rel {rel:.2e}")
            if rel > tol:
                failures.append(f"{precision} step {i + 1}: loss {want} vs torch {got}")
            if i == 0:
                worst = 0.0
                for name, g in want_grads.items():
                    ref = params[name].grad
                    err = (g - ref).norm().item() / max(ref.norm().item(), 1e-30)
                    worst = max(worst, err)
                    if err > tol:
                        failures.append(f"{precision} step 1 grad {name}: rel err {err:.2e}")
                print(f"{precision} step 1: {len(want_grads)} gradients, worst rel err {worst:.2e}")
            opt.step()
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
