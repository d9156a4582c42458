#!/usr/bin/env python3
"""PyTorch eager AMP on the same MLP step as bench/gpu_bench.cc, for the ratio.

Model [1024] -> Linear(H) -> ReLU -> Linear(H) -> ReLU -> Linear(1000), batch
1024, AdamW, cross entropy; each step copies its batch from host memory to the
GPU (as ampd's trainer does) and reads the loss with .item() (as ampd reports
it). 32-true runs with TF32 off; bf16-mixed is torch.autocast(bfloat16);
16-mixed is torch.autocast(float16) with torch.amp.GradScaler: the recipes
Lightning's precision strings stand for. Modes interleave round by round and
the median round is reported. Prints "RESULT torch ..." lines, or a SKIPPED
line when torch or a GPU is missing (exit 0 either way).
"""

import argparse
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", default="4096,8192")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIPPED torch_amp_bench: PyTorch is not importable here")
        return 0
    if not torch.cuda.is_available():
        print("SKIPPED torch_amp_bench: torch.cuda.is_available() is False")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    inputs, classes, batch = 1024, 1000, args.batch
    features = torch.randn(batch * 8, inputs).pin_memory()
    labels = torch.randint(0, classes, (batch * 8,)).pin_memory()

    def make(hidden, mode):
        torch.manual_seed(1)
        model = torch.nn.Sequential(
            torch.nn.Linear(inputs, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
            torch.nn.Linear(hidden, classes)).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cuda", enabled=(mode == "16-mixed"))
        dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(mode)
        state = {"i": 0}

        def step():
            i = state["i"] % 8
            state["i"] += 1
            x = features[i * batch:(i + 1) * batch].to(dev, non_blocking=True)
            y = labels[i * batch:(i + 1) * batch].to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss.item()
        return step

    modes = ["32-true", "bf16-mixed", "16-mixed"]
    for hidden in [int(h) for h in args.hidden.split(",")]:
        steps = [make(hidden, m) for m in modes]
        for s in steps:
            for _ in range(3):
                s()
        times = [[] for _ in modes]
        for r in range(args.rounds):
            for i in range(len(modes)):
                m = (i + r) % len(modes)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    steps[m]()
                torch.cuda.synchronize()
                times[m].append((time.perf_counter() - t0) / args.steps)
        weights = inputs * hidden + hidden * hidden + hidden * classes
        for m, mode in enumerate(modes):
            step_s = statistics.median(times[m])
            tflops = 6.0 * batch * weights / step_s / 1e12
            print(f"torch hidden={hidden} {mode}: {batch / step_s:.0f} samples/s, "
                  f"{step_s * 1e3:.3f} ms/step, {tflops:.1f} TFLOP/s")
            print(f"RESULT torch hidden={hidden} precision={mode} "
                  f"samples_per_s={batch / step_s:.1f} tflops={tflops:.2f}")
        del steps
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
