#!/usr/bin/env bash
# `dtrain pipeline` on bad input: each case must exit non-zero with an error naming the flag.
# Usage: pipeline_errors.sh path/to/dtrain
set -u
dtrain=$1
failures=0

# expect_error "<text the error must contain>" args...
expect_error() {
  local want=$1
  shift
  local err rc
  err=$("$dtrain" pipeline "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "FAIL: dtrain pipeline $* exited 0, expected an error containing: $want"
    failures=$((failures + 1))
  elif [[ $err != *"$want"* ]]; then
    echo "FAIL: dtrain pipeline $*"
    echo "  expected the error to contain: $want"
    echo "  got: $err"
    failures=$((failures + 1))
  else
    echo "ok: $* -> $err"
  fi
}

expect_error "--microbatches must be >= 1, got 0" --stages 4 --microbatches 0
expect_error "--stages must be >= 1, got 0" --stages 0 --microbatches 4
expect_error "--global-batch 10 is not divisible into --microbatches 4" \
  --stages 2 --microbatches 4 --global-batch 10
expect_error '--schedule "pipedream" is not one of gpipe, 1f1b, interleaved, zb-h1' \
  --stages 2 --microbatches 4 --schedule pipedream
expect_error "--chunks 3 needs at least --stages * --chunks = 12 layers" \
  --stages 4 --microbatches 8 --schedule interleaved --chunks 3 --layers 8
expect_error "--chunks 2 applies only to --schedule interleaved" \
  --stages 4 --microbatches 8 --schedule 1f1b --chunks 2
expect_error "--stages 5 is larger than --layers 4" --stages 5 --microbatches 8 --layers 4
expect_error "--stage-layers 3,3,1 sums to 7, not --layers 8" \
  --stages 3 --microbatches 4 --layers 8 --stage-layers 3,3,1
expect_error "--stage-layers 3,3 has 2 entries, but --stages is 3" \
  --stages 3 --microbatches 4 --stage-layers 3,3
expect_error "--stage-layers" --stages 2 --microbatches 4 --stage-layers 3,x
expect_error '--send-mode "sometimes"' --stages 2 --microbatches 4 --send-mode sometimes
expect_error "--forward-time must be >= 0" --stages 2 --microbatches 4 --forward-time -1
expect_error "--stages" --microbatches 4  # required
expect_error "cannot write /nonexistent-dir/t.svg" --stages 2 --microbatches 2 \
  --svg /nonexistent-dir/t.svg

if [[ $failures -ne 0 ]]; then
  echo "$failures case(s) failed"
  exit 1
fi
