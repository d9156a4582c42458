#!/usr/bin/env bash
# Data-parallel step time on this machine: ampd_train as 1 worker (OpenMP on
# every core) and as 2 workers (one core each, meeting through --rendezvous
# as srun would start them), the same job (MLP 784-2048-2048-10, global batch
# 256, 32-true, synthetic data, 30 steps), one after the other; medians of
# steps 6-30, with each 2-worker step's all-reduce time and the share of it
# the backward hid. See bench/README.md.
#   bench/ddp_step_bench.sh   (builds ampd_train with -c opt first)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //engine/runner:ampd_train >/dev/null 2>&1
train=bazel-out/k8-opt/bin/engine/runner/ampd_train
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/spec.json" <<'JSON'
{"model": {"mlp": {"hidden": [2048, 2048]}},
 "data": {"synthetic": {"numExamples": 8192, "featureDim": 784, "numClasses": 10, "seed": 7,
                        "numTestExamples": 256}},
 "optimizer": {"adamw": {}, "lr": 0.001},
 "precision": {"profile": "32-true"},
 "training": {"steps": 30, "batchSize": 256, "seed": 3}}
JSON
"$train" --json --log_every=1 "$dir/spec.json" > "$dir/one.jsonl"
OMP_NUM_THREADS=1 SLURM_PROCID=1 SLURM_NTASKS=2 "$train" --rendezvous="$dir/r" "$dir/spec.json" &
OMP_NUM_THREADS=1 SLURM_PROCID=0 SLURM_NTASKS=2 "$train" --json --log_every=1 \
  --rendezvous="$dir/r" "$dir/spec.json" > "$dir/two.jsonl"
wait
python3 - "$dir/one.jsonl" "$dir/two.jsonl" <<'PY'
import json, statistics as st, sys
def steps(path):
    return [json.loads(l) for l in open(path) if '"type":"step"' in l]
one, two = steps(sys.argv[1]), steps(sys.argv[2])
ms = lambda rs: st.median(256 / r["samples_per_s"] * 1000 for r in rs[5:])
print(f"1 worker, 2 threads:   step {ms(one):.1f} ms")
print(f"2 workers, 1 thread each: step {ms(two):.1f} ms "
      f"({ms(two) / ms(one):.2f}x), all-reduce {st.median(r['allreduce_s'] for r in two[5:]) * 1000:.1f} ms"
      f" per step, {100 * st.median(r['allreduce_hidden'] for r in two[5:]):.0f} % of it hidden")
print(f"worst relative loss gap: {max(abs(a['loss'] - b['loss']) / a['loss'] for a, b in zip(one, two)):.3g}")
PY
