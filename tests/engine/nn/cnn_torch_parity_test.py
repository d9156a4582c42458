#!/usr/bin/env python3
"""ampd's CNN against PyTorch eager: same weights, same batches, same losses.

Runs cnn_parity_dump (argv[1]) for 32-true and bf16-mixed, loads the initial
parameters it wrote (nn.Sequential names) into the same model built from
torch.nn layers, replays its 10 SGD steps (lr 0.05, momentum 0.9) in training
mode, and compares every step's loss and the batch norm running statistics
after the last step: 1e-5 relative in 32-true, 1e-4 in bf16-mixed (under
torch.autocast("cpu", bfloat16), whose batch norm, like ampd's, computes in
f32 and keeps the bf16 activation's dtype: with batch norm writing f32, as
ampd's did, the losses were 6e-4 apart). Exit 0 on success; prints "SKIPPED ..."
and exits 3 when torch is missing. The trained weights file ampd exports
loads into the torch model with strict=True and gives ampd's eval logits.
"""

import json
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
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        print("SKIPPED cnn_torch_parity_test: PyTorch is not importable by " + sys.executable)
        return 3
    torch.manual_seed(0)
    torch.set_num_threads(2)

    class Residual(nn.Module):
        def __init__(self, body, shortcut):
            super().__init__()
            self.body = body
            self.shortcut = shortcut

        def forward(self, x):
            return F.relu(self.body(x) + self.shortcut(x))

    def build():
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            Residual(nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16),
                                   nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)),
                     nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False),
                                   nn.BatchNorm2d(16))),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    failures = []
    for precision, tol in (("32-true", 1e-5), ("bf16-mixed", 1e-4)):
        out = tempfile.mkdtemp()
        subprocess.run([dump, out, precision], check=True)
        model = build()
        init = read_safetensors(os.path.join(out, "init.safetensors"), torch)
        names = {k for k, _ in model.named_parameters()}
        if names != set(init):
            failures.append(f"{precision}: parameter names differ: ampd {sorted(init)} torch "
                            f"{sorted(names)}")
            continue
        model.load_state_dict(init, strict=False)  # buffers: torch's own zeros and ones
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        images = open(os.path.join(out, "images.f32"), "rb").read()
        steps = [l.split() for l in open(os.path.join(out, "steps.txt"))]
        per = 16 * 3 * 12 * 12 * 4
        for i, fields in enumerate(steps):
            want = float(fields[0])
            y = torch.tensor([int(v) for v in fields[1:]])
            x = torch.frombuffer(bytearray(images[i * per:(i + 1) * per]),
                                 dtype=torch.float32).reshape(16, 3, 12, 12)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y)
            loss.backward()
            opt.step()
            got = loss.item()
            rel = abs(got - want) / max(abs(got), 1e-12)
            print(f"{precision} step {i + 1}: ampd {want:.8f} torch {got:.8f} rel {rel:.2e}")
            if rel > tol:
                failures.append(f"{precision} step {i + 1}: loss {want} vs torch {got}")
        buffers = read_safetensors(os.path.join(out, "buffers.safetensors"), torch)
        theirs = dict(model.named_buffers())
        for name, mine in buffers.items():
            t = theirs[name].float()
            rel = ((mine - t).abs().max() / t.abs().max().clamp_min(1e-12)).item()
            print(f"{precision} {name}: rel {rel:.2e}")
            if rel > tol:
                failures.append(f"{precision} {name}: running statistic off by {rel:.2e}")
        # The exported weights load into torch.nn strictly (num_batches_tracked
        # is BatchNorm's to fill in), and in eval mode give ampd's logits.
        fresh = build()
        fresh.load_state_dict(read_safetensors(os.path.join(out, "final.safetensors"), torch),
                              strict=True)
        fresh.eval()
        x = torch.frombuffer(bytearray(images[len(steps) * per:(len(steps) + 1) * per]),
                             dtype=torch.float32).reshape(16, 3, 12, 12)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                             enabled=precision == "bf16-mixed"):
            got = fresh(x).float().flatten()
        want = torch.tensor([float(l) for l in open(os.path.join(out, "eval_logits.txt"))])
        rel = ((got - want).abs().max() / want.abs().max()).item()
        print(f"{precision} eval logits from the exported weights: rel {rel:.2e}")
        if rel > (1e-5 if precision == "32-true" else 1e-4):
            failures.append(f"{precision}: eval logits from the exported weights off by {rel:.2e}")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
