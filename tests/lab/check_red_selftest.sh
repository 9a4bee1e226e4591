#!/usr/bin/env bash
# The red check can fail: it must reject the solved lab (tests pass) and a lab with a typo (a test
# fails with NameError, not NotImplementedError), and accept the unsolved lab.py.
set -euo pipefail
# The engine cross-checks are not what is tested here: leave the module out (faster).
export PYTHONPATH=
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lab=$here/../../lab
python=${PYTHON:-$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$lab/lab.py" "$lab/solution.py" "$lab/test_lab.py" "$tmp/"
# One exercise "solved" with a typo: red, but for the wrong reason.
"$python" - "$tmp" <<'PY'
import sys
path = sys.argv[1] + "/lab.py"
text = open(path).read()
stub = 'raise NotImplementedError("pipeline_bubble: exercise 4.1")'
assert stub in text, "lab.py's pipeline_bubble stub moved: update this test"
open(sys.argv[1] + "/typo.py", "w").write(
    text.replace(stub, "return (stages - 1) / (microbatche + stages - 1)"))
PY
fail=0
check() {  # check MODULE accepts|rejects WHY
  local out rc=0
  out=$(bash "$here/check_red.sh" "$tmp" "$1" 2>&1) || rc=$?
  if { [ "$2" = accepts ] && [ $rc -ne 0 ]; } || { [ "$2" = rejects ] && [ $rc -eq 0 ]; }; then
    echo "FAIL: check_red should have $2 $1 ($3); it exited $rc:"
    echo "$out" | tail -n 5
    fail=1
  else
    echo "ok: check_red $2 $1 ($3): $(echo "$out" | tail -n 1)"
  fi
}
check lab accepts "every test fails with NotImplementedError"
check solution rejects "every test passes"
check typo rejects "pipeline_bubble raises NameError"
exit $fail
