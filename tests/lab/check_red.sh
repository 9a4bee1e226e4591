#!/usr/bin/env bash
# Red for the right reason: runs lab/test_lab.py against the unsolved lab.py and passes only when
# every test that ran failed with NotImplementedError (none passed, none failed otherwise, none
# errored); tests are skipped only for the engine module's absence, with that reason.
# Usage: check_red.sh [LAB_DIR [MODULE]] (defaults: this checkout's lab/ and lab); PYTHON picks
# the interpreter (default /usr/bin/python3 where present: Debian's, with pytest and NumPy).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lab_dir=${1:-$here/../../lab}
module=${2:-lab}
python=${PYTHON:-$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}
min_tests=${LAB_MIN_TESTS:-25}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

rc=0
(cd "$lab_dir" && PYTHONDONTWRITEBYTECODE=1 LAB_MODULE=$module "$python" -m pytest -q \
  -p no:cacheprovider --junitxml="$tmp/red.xml" test_lab.py >"$tmp/pytest.log" 2>&1) || rc=$?
# pytest's exit codes: 1 = some tests failed (what red means); 0 = all passed; 2+ = interrupted,
# usage or collection errors, no tests.
if [ "$rc" -ne 1 ]; then
  tail -n 30 "$tmp/pytest.log"
  echo "check_red: pytest against $module exited $rc, not 1 (tests ran and failed)" >&2
  exit 1
fi
"$python" - "$tmp/red.xml" "$module" "$min_tests" <<'PY'
import collections
import sys
import xml.etree.ElementTree as ET

path, module, min_tests = sys.argv[1], sys.argv[2], int(sys.argv[3])
outcomes = collections.Counter()
wrong = []
for case in ET.parse(path).getroot().iter("testcase"):
    name = case.get("name")
    failure = case.find("failure")
    error = case.find("error")
    skipped = case.find("skipped")
    if failure is not None:
        text = (failure.get("message") or "") + (failure.text or "")
        if failure.get("message", "").startswith("NotImplementedError") or \
                "\nE       NotImplementedError" in text:
            outcomes["NotImplementedError"] += 1
        else:
            wrong.append(f"{name}: failed with {failure.get('message', '?').splitlines()[0]}")
    elif error is not None:
        wrong.append(f"{name}: error {(error.get('message') or '?').splitlines()[0]}")
    elif skipped is not None:
        reason = skipped.get("message") or ""
        if "dtrain Python module is not importable" in reason:
            outcomes["skipped (no engine module)"] += 1
        else:
            wrong.append(f"{name}: skipped ({reason})")
    else:
        wrong.append(f"{name}: passed against the unsolved {module}")
summary = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
if wrong:
    print(f"check_red: {len(wrong)} test(s) against {module} are not red for the right reason:")
    for line in wrong:
        print("  " + line)
    sys.exit(1)
if outcomes["NotImplementedError"] < min_tests:
    print(f"check_red: only {outcomes['NotImplementedError']} tests failed (at least {min_tests})")
    sys.exit(1)
print(f"check_red: red for the right reason against {module}: {summary}")
PY
