#!/usr/bin/env bash
# What tools/main_job does, with the binaries Bazel built: start ampd, submit
# the bf16-mixed Fashion-MNIST example, watch it to the end, and require a
# final test accuracy of at least 85%.
set -euo pipefail
ampd="$1"; ampctl="$2"; spec="$3"
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  echo "SKIP: Fashion-MNIST not installed (dataset-fashion-mnist)"; exit 1
fi
dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/main_job.XXXXXX")"
"$ampd" --listen=127.0.0.1:0 --data_dir="$dir/data" --port_file="$dir/port" 2>"$dir/ampd.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do [ -s "$dir/port" ] && break; sleep 0.1; done
"$ampctl" --server="127.0.0.1:$(cat "$dir/port")" submit "$spec" --watch | tee "$dir/out.txt" | tail -n 3
acc=$(sed -n 's/.*SUCCEEDED: final test accuracy \([0-9.]*\)%.*/\1/p' "$dir/out.txt")
[ -n "$acc" ] || { echo "FAIL: no final accuracy line"; exit 1; }
python3 -c "import sys; a=float('$acc'); print('accuracy', a); sys.exit(0 if a >= 85.0 else 1)"
