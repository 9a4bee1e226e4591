#!/usr/bin/env bash
# `dtrain train` refuses before its first step whatever would fail later or make no sense:
# output paths that cannot be written, input files that are missing or directories, values out
# of range, runs larger than the machine's memory or the threads backend. Each case must exit
# non-zero within a second or two, naming the flag. Usage: train_guards.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
quick=(train --model tiny --eval-every 0 --eval-batches 1)

# expect_fast_error PATTERN ARGS...: like expect_error, and within 30 s (the check is up front,
# so the 100000 steps asked for, minutes of work, never run).
expect_fast_error() {
  local start=$SECONDS
  expect_error "$@"
  if ((SECONDS - start > 30)); then
    echo "FAIL: dtrain ${*:2} took $((SECONDS - start)) s to fail: not checked up front"
    failures=$((failures + 1))
  fi
}

# Paths, checked before the first step.
expect_fast_error '--save /proc/x.*cannot' "${quick[@]}" --steps 100000 --save /proc/x
expect_fast_error '--save: is empty' "${quick[@]}" --steps 100000 --save ""
expect_fast_error '--data: is empty' "${quick[@]}" --steps 100000 --data ""
expect_fast_error '--data .*missing.txt: no such file' "${quick[@]}" --steps 100000 --data "$tmp/missing.txt"
expect_fast_error '--data .*is a directory' "${quick[@]}" --steps 100000 --data "$tmp"
expect_fast_error '--cluster .*missing.json: no such file' "${quick[@]}" --steps 100000 --dp 2 \
  --ranks-per-node 1 --cluster "$tmp/missing.json"
expect_fast_error '--cluster .*is a directory' "${quick[@]}" --steps 100000 --dp 2 --ranks-per-node 1 \
  --cluster "$tmp"
expect_fast_error '--timeline .*is a directory' "${quick[@]}" --steps 100000 --pp 2 --timeline /tmp
expect_fast_error '--timeline /proc/t.svg.*cannot be created' "${quick[@]}" --steps 100000 --pp 2 \
  --timeline /proc/t.svg
expect_fast_error '--trace .*no directory' "${quick[@]}" --steps 100000 --pp 2 \
  --trace "$tmp/no/such/dir/t.json"
expect_fast_error '--resume: is empty' "${quick[@]}" --steps 100000 --resume ""
if [[ -e "$tmp/no" ]]; then
  echo "FAIL: a refused --trace left $tmp/no behind"
  failures=$((failures + 1))
fi

# Values that make no sense.
expect_fast_error '--beta1 must be in \[0, 1\) \(got 1.5\)' "${quick[@]}" --beta1 1.5
expect_fast_error '--beta2 must be in \[0, 1\) \(got -1\)' "${quick[@]}" --beta2 -1
expect_fast_error '--grad-clip must be a non-negative number' "${quick[@]}" --grad-clip -1
expect_fast_error '--lr must be a positive number' "${quick[@]}" --lr 0
expect_fast_error '--lr must be a positive number' "${quick[@]}" --lr nan
expect_fast_error '--min-lr must be in' "${quick[@]}" --min-lr 1
expect_fast_error '--weight-decay must be a non-negative number' "${quick[@]}" --weight-decay inf
expect_fast_error '--seed: must be at least 0 \(got -1\)' "${quick[@]}" --seed -1
expect_fast_error '--warmup must be in \[0, --steps 20\] \(got 30\)' "${quick[@]}" --steps 20 --warmup 30
expect_fast_error '--ranks-per-node: must be at least 1 \(got 0\)' "${quick[@]}" --dp 2 --ranks-per-node 0
expect_fast_error '--log-every: must be at least 0 \(got -3\)' "${quick[@]}" --log-every -3
expect_fast_error '--val-fraction must be between 0 and 1' "${quick[@]}" --val-fraction 1.5
expect_fast_error '--schedule interleaved needs --pp 2 or more' "${quick[@]}" --schedule interleaved
expect_fast_error '--vp needs --pp 2' "${quick[@]}" --vp 2
expect_fast_error '--stage-layers needs --pp 2' "${quick[@]}" --stage-layers 1,1

# Too big: refused with the figures, never std::bad_alloc or a failed thread start.
expect_fast_error 'needs at least [0-9.]+ GiB .* GiB is available' "${quick[@]}" --hidden 8192 \
  --heads 64 --layers 48
expect_fast_error '5000 rank threads is more than the threads backend runs' "${quick[@]}" \
  --dp 5000 --global-batch 5000

# More evaluation batches than the validation split holds: capped, with a note.
out=$("$DTRAIN" train --model tiny --steps 2 --eval-batches 100000 2>&1)
if [[ $? -eq 0 && "$out" == *"--eval-batches 100000 capped to"* ]]; then
  echo "ok: --eval-batches 100000 is capped with a note"
else
  echo "FAIL: --eval-batches 100000: no cap note (or a failure):"
  echo "$out" | tail -3
  failures=$((failures + 1))
fi

# The version, on its own and in the JSON report.
expect_output '^dtrain [0-9]+\.[0-9]+\.[0-9]+' --version
expect_output 'blas: OpenBLAS' --version
expect_output '"build": \{' train --model tiny --steps 1 --eval-batches 1 --json
finish
