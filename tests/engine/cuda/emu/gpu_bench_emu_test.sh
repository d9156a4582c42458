#!/usr/bin/env bash
# Runs bench/gpu_bench, built against the CUDA emulator, at toy sizes and
# checks that it produces its whole report: the device line, the GEMM RESULT,
# one RESULT per (hidden, precision) and the ratio lines, and --profile's
# tables (every kernel the GPT step runs, attention's among them); then that the
# bundle's summary (tools/gpu_bundle_summary.py) reads them, with and without
# PyTorch's numbers.
set -euo pipefail
out=$("$1" --hidden=64,128 --batch=32 --steps=2 --rounds=1 --gemm=256 \
  --gpt_layers=1 --gpt_embd=32 --gpt_heads=2 --gpt_block=16 --gpt_vocab=64 --gpt_batch=2 \
  --profile 2>&1) || {
  echo "$out"
  echo "FAIL: gpu_bench exited non-zero"
  exit 1
}
echo "$out"
fail=0
expect() {
  if ! grep -qE "$1" <<<"$out"; then
    echo "FAIL: no line matching: $1"
    fail=1
  fi
}
expect '^device 0: ampd CUDA emulator'
expect '^RESULT gemm size=256 cublas_tflops=[0-9.]+ engine_tflops=[0-9.]+'
for h in 64 128; do
  for p in 32-true bf16-mixed 16-mixed; do
    expect "^RESULT mlp hidden=$h precision=$p samples_per_s=[0-9.]+ tflops=[0-9.]+"
  done
  expect "^hidden $h: bf16-mixed / 32-true = [0-9.]+x"
done
expect '^gpt_step attention kernels: WMMA$'
expect '^RESULT gpt layers=1 embd=32 block=16 batch=2 tokens_per_s=[0-9.]+ mfu=[0-9.]+'
# Then the attention kernels at the GPT step's shape, mma.sync's outputs
# against WMMA's (they agree on the emulator too), both timed; then the GPT
# step with mma.sync's (--gpt_attention=both, the default).
expect '^RESULT attention_check y_max_diff=[0-9.e-]+ lse_max_diff=[0-9.e-]+ dx_max_diff=[0-9.e-]+ agree=1$'
for k in mma wmma; do
  expect "^RESULT attention kernels=$k fwd_ms=[0-9.]+ bwd_ms=[0-9.]+"
done
expect '^RESULT attention_dropout p=0.1 mma_fwd_bwd_ms=[0-9.]+ mma_vs_undropped=[0-9.]+ wmma_fwd_bwd_ms=[0-9.]+ wmma_vs_undropped=[0-9.]+$'
expect '^gpt_step attention kernels: mma.sync$'
expect '^RESULT gpt_mma layers=1 embd=32 block=16 batch=2 tokens_per_s=[0-9.]+ mfu=[0-9.]+'
expect "^gpt_step bf16-mixed: WMMA's step / mma.sync's = [0-9.]+x$"
# The emulator reports compute capability 9.0: the FP8 GEMM and the GPT step
# in fp8-hybrid run (on its cuBLASLt's FP8 GEMMs).
expect '^RESULT fp8_gemm size=256 cublas_tflops=[0-9.]+ engine_tflops=[0-9.]+'
expect '^RESULT gpt_fp8 layers=1 embd=32 block=16 batch=2 tokens_per_s=[0-9.]+ mfu=[0-9.]+'
expect '^gpt_step: bf16-mixed / fp8-hybrid = [0-9.]+x \(target >= 1.3x\)'
for what in "mlp_step hidden 128 bf16-mixed" "mlp_step hidden 128 32-true" "gpt_step bf16-mixed" \
  "gpt_step fp8-hybrid" "gpt_step bf16-mixed mma.sync"; do
  expect "^profile of $what: 2 steps, [0-9.]+ ms/step synchronised"
done
for k in matmul causal_attention causal_attention_backward layer_norm_backward embedding_backward \
  fp8_matmul fp8_cast_transpose; do
  expect "^PROFILE kernel=$k calls=[0-9]+ ms=[0-9.]+"
done
expect '^\(outside kernels\) +[-0-9.]+ +[-0-9.]+%'
if grep -q SKIPPED <<<"$out"; then
  echo "FAIL: skipped on the emulator"
  fail=1
fi
log=$(mktemp)
echo "$out" >"$log"
torch=$(mktemp)
for h in 64 128; do
  for p in 32-true bf16-mixed 16-mixed; do
    echo "RESULT torch hidden=$h precision=$p samples_per_s=100.0 tflops=0.00" >>"$torch"
  done
done
echo "RESULT torch_gpt step_ms=10.0 tokens_per_s=3.2" >>"$torch"
summary=$(python3 "$2" "$log" "$torch")
echo "$summary"
for h in 64 128; do
  grep -qE "^hidden $h: bf16-mixed / 32-true = [0-9.]+x \((meets|MISSES) >= 3x\)" <<<"$summary" ||
    { echo "FAIL: summary lacks the 3x line for hidden $h"; fail=1; }
  grep -qE "^hidden $h bf16-mixed: ampd / PyTorch eager AMP = [0-9.]+x \(target >= 1.1x" \
    <<<"$summary" || { echo "FAIL: summary lacks the PyTorch ratio for hidden $h"; fail=1; }
done
grep -qE "^gpt 1x32 block 16 bf16-mixed: [0-9]+ tokens/s, MFU [0-9.]+% \((meets|MISSES) >= 45%\)" \
  <<<"$summary" || { echo "FAIL: summary lacks the GPT MFU line"; fail=1; }
grep -qE "^gpt bf16-mixed: ampd / PyTorch eager AMP = [0-9.]+x \((meets|MISSES) >= 1.1x\)" \
  <<<"$summary" || { echo "FAIL: summary lacks the GPT ratio"; fail=1; }
# (The emulator's rates print as 0.00 TFLOP/s: no ratio to take.)
grep -qE "^gemm 256\^3 fp8: no cuBLASLt rate measured" <<<"$summary" ||
  { echo "FAIL: summary lacks the FP8 GEMM line"; fail=1; }
fp8_rate=$(printf 'RESULT fp8_gemm size=8 cublas_tflops=100.0 engine_tflops=95.0\n' >"$log.fp8" &&
  python3 "$2" "$log.fp8" /nonexistent)
grep -qE "^gemm 8\^3 fp8: engine 95.0 TFLOP/s = 0.95 of cuBLASLt \(meets >= 0.90\)" <<<"$fp8_rate" ||
  { echo "FAIL: summary's FP8 GEMM ratio: $fp8_rate"; fail=1; }
grep -qE "^attention at the GPT shape, WMMA / mma.sync time: forward [0-9.]+x \([0-9.]+ ms\), backward [0-9.]+x" <<<"$summary" ||
  { echo "FAIL: summary lacks the attention kernels' line"; fail=1; }
grep -qE "^attention with dropout 0.1 \(forward \+ backward\): mma.sync [0-9.]+ ms \([0-9.]+x without\), WMMA [0-9.]+ ms \([0-9.]+x without\)" <<<"$summary" ||
  { echo "FAIL: summary lacks the attention dropout line"; fail=1; }
grep -qE "^gpt fp8-hybrid / bf16-mixed = [0-9.]+x \((meets|MISSES) >= 1.3x\)" <<<"$summary" ||
  { echo "FAIL: summary lacks the FP8 GPT ratio"; fail=1; }
grep -qE "^attention mma.sync against WMMA on random data: agree \(largest difference [0-9.e-]+ of the largest value\)" \
  <<<"$summary" || { echo "FAIL: summary lacks the attention check"; fail=1; }
grep -qE "^gpt 1x32 block 16 bf16-mixed with mma.sync attention: [0-9]+ tokens/s, MFU [0-9.]+% \((meets|MISSES) >= 45%\); WMMA's step / mma.sync's [0-9.]+x" \
  <<<"$summary" || { echo "FAIL: summary lacks the mma.sync GPT step"; fail=1; }
# --gpt_attention=wmma: no comparison and no second step; anything else is refused.
out_wmma=$("$1" --hidden=64 --batch=32 --steps=1 --rounds=1 --gemm=64 --gpt_layers=1 --gpt_embd=32 \
  --gpt_heads=2 --gpt_block=16 --gpt_vocab=64 --gpt_batch=2 --gpt_attention=wmma 2>&1) ||
  { echo "$out_wmma"; echo "FAIL: --gpt_attention=wmma exited non-zero"; fail=1; }
if grep -qE "^RESULT (attention|gpt_mma)" <<<"$out_wmma"; then
  echo "FAIL: --gpt_attention=wmma still ran the mma.sync kernels"
  fail=1
fi
if bad=$("$1" --gpt_attention=mma 2>&1); then
  echo "FAIL: --gpt_attention=mma accepted"
  fail=1
elif ! grep -q "gpt_attention must be both or wmma" <<<"$bad"; then
  echo "FAIL: --gpt_attention=mma refused without naming the flag: $bad"
  fail=1
fi
python3 "$2" "$log" /nonexistent | grep -q "no PyTorch numbers" ||
  { echo "FAIL: summary without PyTorch"; fail=1; }
exit $fail
