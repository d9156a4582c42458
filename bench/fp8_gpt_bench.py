#!/usr/bin/env python3
"""FP8 against bf16-mixed on the GPT example, side by side in one run.

Trains examples/fortunes_gpt_bf16.json (4 layers x 256, block 128, batch 32,
fortunes) once per precision with ampd_train, one run after the other (the
same seed, data order and schedule), then prints every evaluation's val loss
for each, the gap to bf16-mixed at the same step, and the step time ratio.
Exits 1 when a gap is over --max_gap_pct (the FP8 issue's bar: 3 %).

  bazel run -c opt //bench:fp8_gpt_bench -- [--steps=N] [--modes=bf16-mixed,fp8-hybrid]

On the CPU the FP8 GEMMs are emulated (decode + f32 GEMM), so the time ratio
there is the emulation's cost, not FP8's speed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(ampd_train, spec, mode, steps):
    with open(spec) as f:
        s = json.load(f)
    s["precision"] = {"profile": mode}
    s["displayName"] = "fp8-bench-" + mode
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(s, f)
        path = f.name
    try:
        cmd = [ampd_train, "--json"] + (["--steps=%d" % steps] if steps else []) + [path]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    evals, step_ms = {}, []
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        if e.get("type") == "eval":
            evals[e["step"]] = e["loss"]
        elif e.get("type") == "step" and e.get("samples_per_s", 0) > 0:
            step_ms.append(1e3 * int(s["training"].get("batchSize", 128)) / e["samples_per_s"])
    return evals, statistics.median(step_ms)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ampd_train", required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--steps", type=int, default=0, help="0: the example's own (2000)")
    p.add_argument("--modes", default="bf16-mixed,fp8-hybrid")
    p.add_argument("--max_gap_pct", type=float, default=3.0)
    a = p.parse_args()
    modes = a.modes.split(",")
    results = {}
    for mode in modes:
        print("training %s ..." % mode, file=sys.stderr, flush=True)
        results[mode] = run(a.ampd_train, a.spec, mode, a.steps)
    base = modes[0]
    steps = sorted(results[base][0])
    print("GPT example (%s), %s steps; val loss (nats/byte) at each evaluation" %
          (os.path.basename(a.spec), a.steps or "all"))
    print("%6s" % "step" + "".join("%14s" % m for m in modes) +
          "".join("%12s" % ("gap " + m.split("-")[0] if i else "") for i, m in enumerate(modes) if i))
    worst = 0.0
    for st in steps:
        row = "%6d" % st + "".join("%14.4f" % results[m][0].get(st, float("nan")) for m in modes)
        for m in modes[1:]:
            gap = 100.0 * (results[m][0][st] - results[base][0][st]) / results[base][0][st]
            worst = max(worst, abs(gap))
            row += "%+11.2f%%" % gap
        print(row)
    print("median step ms: " + ", ".join("%s %.1f" % (m, results[m][1]) for m in modes) +
          "; " + ", ".join("%s/%s %.2fx" % (m, base, results[m][1] / results[base][1])
                           for m in modes[1:]))
    ok = worst <= a.max_gap_pct
    print("largest gap %.2f %% (bar %.1f %%): %s" % (worst, a.max_gap_pct, "met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
