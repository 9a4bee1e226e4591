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

expect_error "--microbatches: must be at least 1 (got 0)" --stages 4 --microbatches 0
expect_error "--stages: must be at least 1 (got 0)" --stages 0 --microbatches 4
expect_error "--global-batch 10 is not divisible into --microbatches 4" \
  --stages 2 --microbatches 4 --global-batch 10
expect_error '--schedule "pipedream" is not one of gpipe, 1f1b, interleaved, zb-h1' \
  --stages 2 --microbatches 4 --schedule pipedream
expect_error "--vp 3 needs at least --stages * --vp = 12 layers" \
  --stages 4 --microbatches 8 --schedule interleaved --vp 3 --layers 8
expect_error "--vp 2 applies only to --schedule interleaved" \
  --stages 4 --microbatches 8 --schedule 1f1b --vp 2
expect_error "--stages 5 is larger than --layers 4" --stages 5 --microbatches 8 --layers 4
expect_error "--stage-layers 3,3,1 sums to 7, not --layers 8" \
  --stages 3 --microbatches 4 --layers 8 --stage-layers 3,3,1
expect_error "--stage-layers 3,3 has 2 entries, but --stages is 3" \
  --stages 3 --microbatches 4 --stage-layers 3,3
expect_error "--stage-layers" --stages 2 --microbatches 4 --stage-layers 3,x
expect_error '--send-mode "sometimes"' --stages 2 --microbatches 4 --send-mode sometimes
expect_error "--forward-time: must be at least 0 (got -1)" --stages 2 --microbatches 4 --forward-time -1
expect_error "--stages" --microbatches 4  # required
expect_error "--svg /nonexistent-dir/t.svg: no directory /nonexistent-dir" --stages 2 \
  --microbatches 2 --svg /nonexistent-dir/t.svg

# A --stage-layers list shorter than --stages is named as such (not as too few layers).
expect_error "--stage-layers 1,2 has 2 entries, but --stages is 4" --stages 4 --microbatches 4 \
  --stage-layers 1,2
expect_error "--stage-layers 2000000000,2000000000 sums to 4000000000 layers; at most 1000000" \
  --stages 2 --microbatches 4 --stage-layers 2000000000,2000000000
expect_error "--stage-layers is empty" --stages 2 --microbatches 4 --stage-layers ""

# Times that are not finite numbers would never end the simulation: refused, each by name.
for flag in --forward-time --backward-time --weight-time --comm-latency; do
  expect_error "$flag: must be a finite number (got inf)" --stages 2 --microbatches 4 "$flag" inf
  expect_error "$flag: must be a finite number (got nan)" --stages 2 --microbatches 4 "$flag" nan
  expect_error "$flag: must be at most 1e+12 (got 1e308)" --stages 2 --microbatches 4 "$flag" 1e308
done
expect_error "--comm-latency: must be at least 0 (got -1)" --stages 2 --microbatches 4 \
  --comm-latency -1

# Counts: not whole, past their bound, or a schedule too large to build and simulate.
expect_error "--stages: must be at most 1024 (got 99999999999999999999)" \
  --stages 99999999999999999999 --microbatches 4
expect_error "--microbatches: must be a whole number (got 1e30)" --stages 4 --microbatches 1e30
expect_error "--vp: must be at least 1 (got 0)" --stages 4 --microbatches 4 \
  --schedule interleaved --vp 0
expect_error "--stages 4 x --microbatches 1000000 x --vp 1 = 4000000 schedule slots" \
  --stages 4 --microbatches 1000000
expect_error "--layers: must be at most 1000000 (got 1000000000)" --stages 4 --microbatches 4 \
  --layers 1000000000
expect_error "--global-batch: must be at least 1 (got 0)" --stages 4 --microbatches 4 \
  --global-batch 0
expect_error "--width: must be at most 10000 (got 99999999999999999999)" --stages 4 \
  --microbatches 4 --width 99999999999999999999

# Output paths are checked before any work: a directory, an empty name, a file /proc refuses.
expect_error "--svg /tmp: is a directory" --stages 2 --microbatches 2 --svg /tmp
expect_error "--trace is empty" --stages 2 --microbatches 2 --trace ""
expect_error "--trace /proc/dtrain-trace.json: cannot be created" --stages 2 --microbatches 2 \
  --trace /proc/dtrain-trace.json

if [[ $failures -ne 0 ]]; then
  echo "$failures case(s) failed"
  exit 1
fi
