# Helpers for the CLI contract tests: each test script sources this file, gets the dtrain
# binary as $1, and exits non-zero on the first expectation that does not hold.
set -u
DTRAIN=${1:?usage: $0 path/to/dtrain}
failures=0

# fail MESSAGE...: counts a failed expectation of the script's own (finish reports them).
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_error PATTERN ARGS...: the command exits non-zero and stderr matches PATTERN.
expect_error() {
  local pattern=$1
  shift
  local err rc
  err=$("$DTRAIN" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "FAIL: dtrain $* exited 0, expected an error matching '$pattern'"
    failures=$((failures + 1))
  elif ! grep -qE -- "$pattern" <<<"$err"; then
    echo "FAIL: dtrain $* (exit $rc): stderr does not match '$pattern':"
    echo "$err" | head -5
    failures=$((failures + 1))
  else
    echo "ok: dtrain $* -> exit $rc: $(head -1 <<<"$err")"
  fi
}

# expect_output PATTERN ARGS...: the command exits 0 and stdout matches PATTERN.
expect_output() {
  local pattern=$1
  shift
  local out rc
  out=$("$DTRAIN" "$@" 2>/dev/null)
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: dtrain $* exited $rc"
    failures=$((failures + 1))
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: dtrain $*: stdout does not match '$pattern'"
    failures=$((failures + 1))
  else
    echo "ok: dtrain $* matches '$pattern'"
  fi
}

finish() {
  if [ $failures -ne 0 ]; then
    echo "$failures expectation(s) failed"
    exit 1
  fi
  echo "all expectations held"
}
