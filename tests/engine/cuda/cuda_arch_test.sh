#!/usr/bin/env bash
# Checks the architectures nvcc compiled into each object file given.
#   cuda_arch_test.sh CUOBJDUMP OBJ...
set -euo pipefail
cuobjdump="$1"
shift
for obj in "$@"; do
  elf=$("$cuobjdump" --list-elf "$obj")
  ptx=$("$cuobjdump" --list-ptx "$obj")
  echo "$obj:"; echo "$elf"; echo "$ptx"
  grep -q 'sm_90a' <<<"$elf" || { echo "FAIL: no sm_90a SASS in $obj"; exit 1; }
  grep -q 'sm_80' <<<"$elf" || { echo "FAIL: no sm_80 SASS in $obj"; exit 1; }
  grep -q 'sm_90' <<<"$ptx" || { echo "FAIL: no compute_90 PTX in $obj"; exit 1; }
done
echo "PASS"
