#!/usr/bin/env python3
"""Prints 'N passed, N failed[, N skipped]' from Bazel's test.xml files.

Usage: summarize_tests.py [TESTLOGS_DIR [EXTRA.xml ...]]. Extra JUnit XML files
(e.g. tools/fuzz --junit) are counted the same way; a missing one is a failure.

Counts test cases (GoogleTest writes one <testcase> per TEST; Bazel writes one
for a plain sh_test/py_test). Exit status: 1 if anything failed or nothing ran.
"""
import os
import sys
import xml.etree.ElementTree as ET


def count(testlogs, extra=()):
    passed = failed = skipped = 0
    failures = []
    found = [(os.path.relpath(root, testlogs), os.path.join(root, "test.xml"))
             for root, _, files in os.walk(testlogs, followlinks=True) if "test.xml" in files]
    found += [(p, p) for p in extra]
    for label, path in found:
        if not os.path.exists(path):
            failed += 1
            failures.append(f"{path}: missing")
            continue
        try:
            tree = ET.parse(path)
        except ET.ParseError as e:
            failed += 1
            failures.append(f"{path}: unreadable ({e})")
            continue
        for case in tree.iter("testcase"):
            name = f"{label}::{case.get('classname', '')}.{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failures.append(name)
            elif case.find("skipped") is not None or case.get("result") == "skipped":
                skipped += 1
            elif case.get("status") == "notrun":
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped, failures


def main():
    testlogs = sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs"
    passed, failed, skipped, failures = count(testlogs, sys.argv[2:])
    for f in failures:
        print(f"FAILED: {f}")
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed or passed + failed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
