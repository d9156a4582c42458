#!/usr/bin/env bash
# Runs gpt_torch_parity_test.py ($2) with the test-only torch venv's python
# (AMPD_TORCH_PYTHON, set by tools/test; python3 otherwise) on the dump
# binary ($1). Without torch the test is reported skipped (junit), not passed.
set -uo pipefail
PY="${AMPD_TORCH_PYTHON:-python3}"
"$PY" "$2" "$1"
rc=$?
if ((rc == 3)) && [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
  cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="gpt_torch_parity_test" tests="1" skipped="1"><testcase classname="gpt_torch_parity_test" name="parity"><skipped message="PyTorch is not importable by $PY"/></testcase></testsuite></testsuites>
XML
  exit 0
fi
exit "$rc"
