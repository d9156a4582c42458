#!/usr/bin/env bash
# Runs tests/client/python with pytest from the test's runfiles (bazel test
# //tests/client/python:all). Each pytest test becomes a <testcase> in Bazel's
# test.xml (pytest writes it to $XML_OUTPUT_FILE).
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
args=(-q -p no:cacheprovider -o junit_family=xunit2)
[[ -n "${XML_OUTPUT_FILE:-}" ]] && args+=("--junitxml=$XML_OUTPUT_FILE")
[[ -n "${TEST_TMPDIR:-}" ]] && args+=("--basetemp=$TEST_TMPDIR/pytest")
exec "${PYTHON:-python3}" -m pytest "${args[@]}" tests/client/python
