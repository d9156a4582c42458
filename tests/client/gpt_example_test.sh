#!/usr/bin/env bash
# The README's GPT commands on examples/fortunes_gpt_bf16.json, shortened:
# ampd_train --steps, ampd_train --explain, and ampctl submit --watch against
# a real ampd (the spec's steps cut to 20 for the test; the full 2000-step run
# and its result are in the README); and the FP8 example
# (examples/fortunes_gpt_fp8.json): its plan and a short run through ampctl.
set -euo pipefail
ampd="$1"; ampctl="$2"; ampd_train="$3"; spec="$4"; fp8_spec="$5"
if [ ! -d /usr/share/games/fortunes ]; then
  echo "SKIP: the fortunes package is not installed"; exit 1
fi
dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/gpt_example.XXXXXX")"
fail() { echo "FAIL: $*"; exit 1; }

"$ampd_train" --steps=30 --log_every=10 "$spec" | tee "$dir/train.txt"
grep -q "optimizer: AdamW lr 0.001, betas (0.9, 0.99), eps 1e-08, weight decay 0.1 on 16 tensors" "$dir/train.txt" \
  || fail "no optimizer line with the weight-decay groups"
grep -q "none on 36 tensors ([0-9]* parameters: wte.weight, wpe.weight, h.\*.ln_1.weight" "$dir/train.txt" \
  || fail "the tensors without weight decay are not listed"
grep -Eq "step +30/30 .* tokens/s  MFU [0-9.]+%" "$dir/train.txt" || fail "no tokens/s and MFU"
val=$(sed -n 's/^eval at step 30: val loss \([0-9.]*\)  \([0-9.]*\) bits\/byte.*/\1 \2/p' "$dir/train.txt")
[ -n "$val" ] || fail "no val loss / bits per byte at step 30"
# Learning from uniform (ln 256 = 5.55 nats) in 30 steps; bits = nats / ln 2.
python3 -c "
import math, sys
loss, bpb = map(float, '$val'.split())
print('val loss', loss, 'bits/byte', bpb)
sys.exit(0 if loss < 4.0 and abs(bpb - loss / math.log(2)) < 1e-3 else 1)" || fail "val loss"

"$ampd_train" --explain "$spec" > "$dir/explain.txt"
grep -Eq "^scaled_dot_product_attention +h\.3\.attn +bf16 +lower_precision +bf16 +bf16 +[0-9]+" "$dir/explain.txt" \
  || fail "the explain plan lacks layer 3's attention in bf16"
grep -Eq "^layer_norm +ln_f +f32,f32,f32 +fp32 +f32" "$dir/explain.txt" || fail "ln_f is not f32"
grep -Eq "^lm_head_cross_entropy +lm_head .* f32 +4$" "$dir/explain.txt" || fail "no fused head + loss"

python3 -c "
import json, sys
s = json.load(open('$spec')); s['training']['steps'] = '20'; s['training']['evalInterval'] = '10'
s['data']['tokens']['evalWindows'] = '64'
json.dump(s, open('$dir/short.json', 'w'))"
"$ampd" --listen=127.0.0.1:0 --data_dir="$dir/data" --port_file="$dir/port" 2>"$dir/ampd.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do [ -s "$dir/port" ] && break; sleep 0.1; done
"$ampctl" --server="127.0.0.1:$(cat "$dir/port")" submit "$dir/short.json" --watch | tee "$dir/out.txt" | tail -n 4
grep -Eq "eval  step 20: val loss [0-9.]+  [0-9.]+ bits/byte" "$dir/out.txt" || fail "ampctl watch shows no val loss"
grep -Eq "tokens/s  MFU [0-9.]+%" "$dir/out.txt" || fail "ampctl watch shows no tokens/s and MFU"
grep -q "SUCCEEDED: final val loss" "$dir/out.txt" || fail "no final val loss line"
job=$(sed -n 's/^job \([^ ]*\) SUCCEEDED.*/\1/p' "$dir/out.txt")
"$ampctl" --server="127.0.0.1:$(cat "$dir/port")" get "$job" --output=json > "$dir/get.json"
grep -q '"optimizer": "AdamW lr 0.001, .*weight decay 0.1 on 16 tensors' "$dir/get.json" \
  || fail "the job does not show its optimizer's weight-decay groups"

# The FP8 example: every block linear an FP8 GEMM in its plan (4 x 4), and a
# short run (5 steps) to SUCCEEDED with its scaling records in the stream.
"$ampd_train" --explain "$fp8_spec" > "$dir/explain_fp8.txt"
n=$(grep -Ec "^fp8_linear +h\.[0-3]\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj) .*FP8 GEMM: input e4m3, weight e4m3, grad_output e5m2, delayed scaling" "$dir/explain_fp8.txt" || true)
[ "$n" = 16 ] || fail "the FP8 plan marks $n FP8 GEMMs, not 16"
grep -Eq "^lm_head_cross_entropy +lm_head " "$dir/explain_fp8.txt" || fail "the FP8 plan lost the head"
python3 -c "
import json
s = json.load(open('$fp8_spec')); s['training']['steps'] = '5'
s['data']['tokens']['evalWindows'] = '16'
json.dump(s, open('$dir/short_fp8.json', 'w'))"
"$ampctl" --server="127.0.0.1:$(cat "$dir/port")" submit "$dir/short_fp8.json" --watch | tee "$dir/out_fp8.txt" | tail -n 2
grep -q "SUCCEEDED: final val loss" "$dir/out_fp8.txt" || fail "the FP8 example did not succeed"
job=$(sed -n 's/^job \([^ ]*\) SUCCEEDED.*/\1/p' "$dir/out_fp8.txt")
"$ampctl" --server="127.0.0.1:$(cat "$dir/port")" get "$job" --output=json > "$dir/get_fp8.json"
grep -q '"profile": "fp8-hybrid"' "$dir/get_fp8.json" || fail "the job does not show its precision"
echo PASS
