#!/usr/bin/env bash
# Runs python_readers_test.py under pytest: $1 is write_samples, $2 the test.
# Fails when pytest collects no tests (a broken import or an empty file must
# not pass silently).
set -uo pipefail
case "$1" in /*) WRITE_SAMPLES="$1" ;; *) WRITE_SAMPLES="$PWD/$1" ;; esac
export WRITE_SAMPLES
test_py="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
xml="${XML_OUTPUT_FILE:-$tmp/pytest.xml}"
PYTHON="${PYTHON:-python3}"
export PYTHONDONTWRITEBYTECODE=1
"$PYTHON" -m pytest -q -p no:cacheprovider --basetemp="$tmp/pytest" --junitxml="$xml" "$test_py"
rc=$?
if ((rc != 0)); then
  ((rc == 5)) && echo "FAIL: pytest collected no tests"
  exit "$rc"
fi
"$PYTHON" - "$xml" <<'PY' || exit 1
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
ran = sum(int(s.get("tests", 0)) - int(s.get("skipped", 0)) for s in suites)
if ran == 0:
    sys.exit("FAIL: no tests ran")
PY
