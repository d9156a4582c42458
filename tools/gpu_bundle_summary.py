#!/usr/bin/env python3
"""Reads the RESULT lines of gpu_bench and torch_amp_bench; prints the ratios
the CUDA issue sets targets for (bench/README.md records them)."""

import re
import sys


def results(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("RESULT "):
                    fields = dict(kv.split("=", 1) for kv in line.split()[2:])
                    rows.append((line.split()[1], fields))
    except OSError:
        pass
    return rows


def main():
    ours = results(sys.argv[1])
    theirs = results(sys.argv[2]) if len(sys.argv) > 2 else []
    if not ours:
        print("summary: no gpu_bench results (no GPU?)")
        return 0
    mlp = {(r["hidden"], r["precision"]): float(r["samples_per_s"]) for k, r in ours if k == "mlp"}
    torch = {(r["hidden"], r["precision"]): float(r["samples_per_s"])
             for k, r in theirs if k == "torch"}
    for kind, r in ours:
        if kind == "gemm":
            if float(r["cublas_tflops"]) <= 0:
                print(f"gemm {r['size']}^3 bf16: no cuBLASLt rate measured")
                continue
            ratio = float(r["engine_tflops"]) / float(r["cublas_tflops"])
            print(f"gemm {r['size']}^3 bf16: engine {r['engine_tflops']} TFLOP/s = "
                  f"{ratio:.2f} of cuBLASLt ({'meets' if ratio >= 0.7 else 'MISSES'} >= 0.70)")
        if kind == "fp8_gemm" and float(r["cublas_tflops"]) <= 0:
            print(f"gemm {r['size']}^3 fp8: no cuBLASLt rate measured")
        elif kind == "fp8_gemm":
            ratio = float(r["engine_tflops"]) / float(r["cublas_tflops"])
            print(f"gemm {r['size']}^3 fp8: engine {r['engine_tflops']} TFLOP/s = "
                  f"{ratio:.2f} of cuBLASLt ({'meets' if ratio >= 0.9 else 'MISSES'} >= 0.90)")
    for hidden in sorted({h for h, _ in mlp}, key=int):
        fp32 = mlp.get((hidden, "32-true"))
        bf16 = mlp.get((hidden, "bf16-mixed"))
        if fp32 and bf16 is not None:
            x = bf16 / fp32
            print(f"hidden {hidden}: bf16-mixed / 32-true = {x:.2f}x "
                  f"({'meets' if x >= 3 else 'MISSES'} >= 3x)")
        for mode in ("32-true", "bf16-mixed", "16-mixed"):
            if (hidden, mode) in mlp and (hidden, mode) in torch:
                x = mlp[(hidden, mode)] / torch[(hidden, mode)]
                target = " (target >= 1.1x: " + ("meets" if x >= 1.1 else "MISSES") + ")" \
                    if mode == "bf16-mixed" else ""
                print(f"hidden {hidden} {mode}: ampd / PyTorch eager AMP = {x:.2f}x{target}")
    torch_gpt = [float(r["tokens_per_s"]) for k, r in theirs if k == "torch_gpt" and "tokens_per_s" in r]
    for kind, r in ours:
        if kind != "gpt":
            continue
        mfu = float(r["mfu"])
        print(f"gpt {r['layers']}x{r['embd']} block {r['block']} bf16-mixed: "
              f"{float(r['tokens_per_s']):.0f} tokens/s, MFU {100 * mfu:.1f}% "
              f"({'meets' if mfu >= 0.45 else 'MISSES'} >= 45%)")
        if torch_gpt:
            x = float(r["tokens_per_s"]) / torch_gpt[0]
            print(f"gpt bf16-mixed: ampd / PyTorch eager AMP = {x:.2f}x "
                  f"({'meets' if x >= 1.1 else 'MISSES'} >= 1.1x)")
    for kind, r in ours:
        if kind == "attention_check":
            worst = max(float(r[f"{t}_max_diff"]) for t in ("y", "lse", "dx"))
            verdict = "agree" if r.get("agree") == "1" else "DISAGREE"
            print(f"attention mma.sync against WMMA on random data: {verdict} "
                  f"(largest difference {worst:.3g} of the largest value)")
    gpt_wmma = [float(r["tokens_per_s"]) for k, r in ours if k == "gpt"]
    for kind, r in ours:
        if kind == "gpt_mma":
            mfu = float(r["mfu"])
            speed = (f"; WMMA's step / mma.sync's {float(r['tokens_per_s']) / gpt_wmma[0]:.2f}x"
                     if gpt_wmma else "")
            print(f"gpt {r['layers']}x{r['embd']} block {r['block']} bf16-mixed with mma.sync "
                  f"attention: {float(r['tokens_per_s']):.0f} tokens/s, MFU {100 * mfu:.1f}% "
                  f"({'meets' if mfu >= 0.45 else 'MISSES'} >= 45%){speed}")
    attention = {r.get("kernels"): r for k, r in ours if k == "attention"}
    if "mma" in attention and "wmma" in attention:
        m, w = attention["mma"], attention["wmma"]
        print(f"attention at the GPT shape, WMMA / mma.sync time: forward "
              f"{float(w['fwd_ms']) / float(m['fwd_ms']):.2f}x ({m['fwd_ms']} ms), backward "
              f"{float(w['bwd_ms']) / float(m['bwd_ms']):.2f}x ({m['bwd_ms']} ms)")
    for kind, r in ours:
        if kind == "attention_dropout":
            print(f"attention with dropout {r['p']} (forward + backward): mma.sync "
                  f"{r['mma_fwd_bwd_ms']} ms ({float(r['mma_vs_undropped']):.2f}x without), "
                  f"WMMA {r['wmma_fwd_bwd_ms']} ms ({float(r['wmma_vs_undropped']):.2f}x without)")
    bf16_gpt = [float(r["tokens_per_s"]) for k, r in ours if k == "gpt"]
    for kind, r in ours:
        if kind == "gpt_fp8" and bf16_gpt:
            x = float(r["tokens_per_s"]) / bf16_gpt[0]
            print(f"gpt fp8-hybrid / bf16-mixed = {x:.2f}x ({'meets' if x >= 1.3 else 'MISSES'} >= 1.3x)")
    if not torch:
        print("no PyTorch numbers (not importable): ours/theirs ratios not computed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
