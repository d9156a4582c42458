#!/usr/bin/env python3
"""PyTorch eager on bench/cnn_bench.cc's CNN step, for the ratio (CPU).

3 x [Conv2d 3x3 (64, 128, 128 channels), BatchNorm2d, ReLU, MaxPool2d 2] on
28x28 single-channel images, flatten, Linear to 10; AdamW, cross entropy;
32-true in f32, bf16-mixed under torch.autocast("cpu", dtype=torch.bfloat16)
over f32 weights. --channels_last runs the model and batch channels-last.
Prints "RESULT torch_cnn step_ms=... images_per_s=...", or a SKIPPED line
when torch is missing (exit 0 either way).
"""

import argparse
import statistics
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--precision", default="bf16-mixed", choices=["32-true", "bf16-mixed"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--channels_last", action="store_true")
    a = p.parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError:
        print("SKIPPED torch_cnn_bench: PyTorch is not importable here")
        return 0
    torch.manual_seed(0)
    layers = []
    cin = 1
    for c in (64, 128, 128):
        layers += [nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
        cin = c
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * 3 * 3, 10))
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    bf16 = a.precision == "bf16-mixed"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    ms = 1e3 * statistics.median(times)
    print(f"RESULT torch_cnn step_ms={ms:.2f} images_per_s={a.batch / ms * 1e3:.0f}")
    return 0


if __name__ == "__main__":
    main()
