#!/usr/bin/env bash
# ampd_train as data-parallel workers: two processes started as srun would
# start them (SLURM_PROCID/SLURM_NTASKS), meeting through --rendezvous, train
# as one process with the same global batch; only rank 0 reports and writes
# the weights; bad places are refused by name.
set -euo pipefail
train=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
unset AMPD_RANK AMPD_WORLD_SIZE SLURM_PROCID SLURM_NTASKS OMPI_COMM_WORLD_RANK \
  OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE JOB_COMPLETION_INDEX
cat > "$tmp/spec.json" <<'JSON'
{"model": {"mlp": {"hidden": [64, 64]}},
 "data": {"synthetic": {"numExamples": 2048, "featureDim": 32, "numClasses": 4, "seed": 7,
                        "numTestExamples": 256}},
 "optimizer": {"adamw": {}, "lr": 0.003},
 "precision": {"profile": "32-true"},
 "training": {"steps": 40, "batchSize": 256, "seed": 3}}
JSON
fail() { echo "FAIL: $*" >&2; exit 1; }

"$train" --json --log_every=1 "$tmp/spec.json" > "$tmp/one.jsonl"

SLURM_PROCID=1 SLURM_NTASKS=2 "$train" --json --log_every=1 --rendezvous="$tmp/rdv" \
  --weights_out="$tmp/rank1.safetensors" "$tmp/spec.json" > "$tmp/rank1.out" 2> "$tmp/rank1.err" &
rank1=$!
SLURM_PROCID=0 SLURM_NTASKS=2 "$train" --json --log_every=1 --rendezvous="$tmp/rdv" \
  --weights_out="$tmp/rank0.safetensors" "$tmp/spec.json" > "$tmp/two.jsonl" \
  || fail "rank 0 exited $?"
wait "$rank1" || fail "rank 1 exited $?: $(cat "$tmp/rank1.err")"

[[ ! -s "$tmp/rank1.out" ]] || fail "rank 1 printed: $(head -3 "$tmp/rank1.out")"
[[ -s "$tmp/rank0.safetensors" ]] || fail "rank 0 wrote no weights"
[[ ! -e "$tmp/rank1.safetensors" ]] || fail "rank 1 wrote weights"

python3 - "$tmp/one.jsonl" "$tmp/two.jsonl" <<'PY'
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r["type"] == "step":
            out[r["step"]] = r["loss"]
    return out
one, two = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(one) == sorted(two) == list(range(1, 41)), (sorted(one), sorted(two))
worst = max(abs(two[s] - one[s]) / abs(one[s]) for s in one)
print(f"2 workers vs 1, 40 steps of 32-true: worst relative loss gap {worst:.3g}")
assert worst <= 1e-5, worst
PY

# A rank with no world, a rank outside its world, flags half given: refused by name.
set +e
out=$("$train" --rendezvous="$tmp/x" "$tmp/spec.json" 2>&1); rc=$?
[[ $rc == 2 && $out == *SLURM_PROCID* ]] || fail "no rank: rc $rc: $out"
out=$(SLURM_PROCID=2 SLURM_NTASKS=2 "$train" --rendezvous="$tmp/y" "$tmp/spec.json" 2>&1); rc=$?
[[ $rc == 2 && $out == *"SLURM_PROCID=2 is outside"* ]] || fail "rank 2 of 2: rc $rc: $out"
out=$("$train" --rank=0 --rendezvous="$tmp/z" "$tmp/spec.json" 2>&1); rc=$?
[[ $rc == 2 && $out == *"--rank and --world_size go together"* ]] || fail "half flags: $out"
set -e
echo "PASS"
