#!/usr/bin/env bash
# The WORKSPACE must only name local repositories: no http_archive, git_repository
# or anything else that downloads. (The machines here have no network, so a
# download would also fail the build itself; this names the rule at fault.)
set -euo pipefail
ws="WORKSPACE"
[ -f "$ws" ] || { echo "FAIL: WORKSPACE not in runfiles"; exit 1; }
bad=$(grep -n -E '\b(http_archive|http_file|git_repository|new_git_repository|maven_install|pip_install|http_jar)\b|https?://' "$ws" || true)
if [ -n "$bad" ]; then echo "FAIL: downloading rule in WORKSPACE:"; echo "$bad"; exit 1; fi
grep -q 'local_repository(name = "rules_cc"' "$ws" || { echo "FAIL: @rules_cc must be local"; exit 1; }
echo PASS
