#!/usr/bin/env bash
# Runs a PyTorch reference test ($2: gpt_torch_parity_test.py,
# gpt_hf_layout_test.py) with the test-only torch venv's python
# (AMPD_TORCH_PYTHON, set by tools/test; python3 otherwise) on the binary $1
# (and any further arguments). When the script exits 3 (torch, or a package it
# needs, missing) the test is reported skipped (junit), not passed.
set -uo pipefail
PY="${AMPD_TORCH_PYTHON:-python3}"
"$PY" "$2" "$1" "${@:3}"
rc=$?
if ((rc == 3)) && [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
  NAME="$(basename "$2" .py)"
  cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="$NAME" tests="1" skipped="1"><testcase classname="$NAME" name="parity"><skipped message="PyTorch (or transformers) is not importable by $PY"/></testcase></testsuite></testsuites>
XML
  exit 0
fi
exit "$rc"
