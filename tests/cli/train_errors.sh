#!/usr/bin/env bash
# `dtrain train` and `dtrain bench train` on bad input: each case must exit non-zero and print
# an error naming the flag or file at fault. Usage: train_errors.sh path/to/dtrain
set -uo pipefail
dtrain=${1:?usage: $0 path/to/dtrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/empty.txt"
printf 'a short file of a few dozen bytes, less than one window\n' > "$tmp/short.txt"
failures=0

# expect_error "<words the message must contain>" args...
expect_error() {
  local words=$1
  shift
  local out rc
  out=$("$dtrain" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "FAIL: dtrain $* exited 0 (expected an error mentioning: $words)"
    failures=$((failures + 1))
    return
  fi
  local w
  IFS='|' read -ra list <<< "$words"
  for w in "${list[@]}"; do
    if [[ "$out" != *"$w"* ]]; then
      echo "FAIL: dtrain $*: error lacks '$w':"
      echo "  $out"
      failures=$((failures + 1))
      return
    fi
  done
  echo "ok: dtrain $* -> $out"
}

expect_error "--data|$tmp/missing.txt|no such file" train --data "$tmp/missing.txt" --steps 1
expect_error "--data|$tmp/empty.txt|empty" train --data "$tmp/empty.txt" --steps 1
expect_error "--data|is a directory" train --data "$tmp" --steps 1
expect_error "--model|huge|tiny" train --model huge --steps 1
# A number past the integer type is refused, not saturated to 2^63-1 (a run of 9.2e18 steps), on
# every command's integer flags.
expect_error "--steps|out of range|99999999999999999999999" train --steps 99999999999999999999999
expect_error "--layers|out of range" train --layers 99999999999999999999999 --steps 1
expect_error "--save-every|out of range" train --save-every 99999999999999999999999 --steps 1
expect_error "--context 32|$tmp/short.txt|is longer than the data" train --data "$tmp/short.txt" --steps 1
expect_error "--seq-length 20|$tmp/short.txt|is longer than the data" train --data "$tmp/short.txt" --seq-length 20 --steps 1
expect_error "--seq-length 512|--context 256" train --context 256 --seq-length 512 --steps 1
expect_error "--context 4096|is longer than the data" train --context 4096 --data "$tmp/short.txt" --steps 1
expect_error "--heads 3|--hidden 32" train --heads 3 --steps 1
expect_error "--layers|positive" train --layers 0 --steps 1
expect_error "--hidden|positive" train --hidden -8 --steps 1
expect_error "--vocab|positive" train --vocab 0 --steps 1
expect_error "--vocab 100|256" train --vocab 100 --steps 1
expect_error "--global-batch|positive" train --global-batch 0 --steps 1
expect_error "--steps|positive" train --steps 0
expect_error "--blas-threads|positive" train --blas-threads 0 --steps 1
expect_error "--layers" train --layers two --steps 1
expect_error "--model|huge" bench train --model huge
expect_error "--steps|(got 0)" bench train --steps 0
# --timeout: seconds a rank waits for its peer; infinity would let a stalled rank hang the job.
for t in 0 -1 inf nan; do
  expect_error "--timeout must be a positive, finite number of seconds|(got $t)" train --timeout $t --steps 1
done
expect_error "--timeout|soon" train --timeout soon --steps 1
expect_error "--timeout must be a positive, finite|(got inf)" collectives --ranks 2 --timeout inf

if [[ $failures -gt 0 ]]; then
  echo "$failures case(s) failed"
  exit 1
fi
