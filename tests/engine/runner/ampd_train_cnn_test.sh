#!/usr/bin/env bash
# The README's CNN commands: ampd_train --explain on examples/fashion_cnn_bf16.json
# lists its layers with autocast's dtypes, and a few steps of it train on
# fashion-mnist (the data set the example names; skipped where it is not
# installed) and write weights with the running statistics.
set -euo pipefail
train=$1
spec=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

"$train" --explain "$spec" > "$tmp/explain.txt" || fail "--explain exited $?"
grep -Eq '^conv2d +0 .* bf16 +bf16' "$tmp/explain.txt" || fail "conv2d 0 not in bf16: $(cat "$tmp/explain.txt")"
grep -Eq '^batch_norm +1 +bf16,f32,f32 +fp32 +f32 +bf16' "$tmp/explain.txt" ||
  fail "batch_norm 1 not computed in f32 with a bf16 output: $(cat "$tmp/explain.txt")"
[[ $(grep -c '^max_pool2d' "$tmp/explain.txt") == 2 ]] || fail "expected two max_pool2d rows"

if [[ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "fashion-mnist is not installed: skipping the training part"
  exit 0
fi
"$train" --json --steps=3 --log_every=1 --weights_out="$tmp/cnn.safetensors" "$spec" \
  > "$tmp/run.jsonl" || fail "training exited $?"
[[ $(grep -c '"step"' "$tmp/run.jsonl") -ge 3 ]] || fail "no step records: $(cat "$tmp/run.jsonl")"
python3 - "$tmp/cnn.safetensors" <<'PY' || fail "weights file"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
names = set(json.loads(data[8:8 + n])) - {"__metadata__"}
want = {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
        "4.weight", "5.running_var", "9.weight", "12.bias"}
missing = want - names
assert not missing, missing
PY
echo PASS
