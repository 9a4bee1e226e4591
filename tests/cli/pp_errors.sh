#!/usr/bin/env bash
# `dtrain train --pp ...` on bad input: each case exits non-zero with an error naming the flag
# at fault. Usage: pp_errors.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

run=(train --model tiny --steps 1 --eval-every 0 --eval-batches 1)
expect_error '--microbatches must be >= 1, got 0' "${run[@]}" --pp 2 --microbatches 0
expect_error '--global-batch 10 is not divisible into --microbatches 4' \
  "${run[@]}" --pp 2 --global-batch 10 --microbatches 4
expect_error '--global-batch 8 is not divisible into --microbatches 3' "${run[@]}" --pp 2 --microbatches 3
expect_error '--schedule "pipedream" is not one of gpipe, 1f1b, interleaved, zb-h1' \
  "${run[@]}" --pp 2 --schedule pipedream
expect_error '--vp 3 needs at least --pp \* --vp = 12 layers .*got --layers 8' \
  "${run[@]}" --pp 4 --microbatches 4 --schedule interleaved --vp 3 --layers 8
expect_error '--vp 2 needs at least --pp \* --vp = 4 layers' \
  "${run[@]}" --pp 2 --schedule interleaved  # the tiny preset has 2 layers; v defaults to 2
expect_error '--vp 2 applies only to --schedule interleaved, not 1f1b' \
  "${run[@]}" --pp 2 --vp 2 --schedule 1f1b
# --vp 2 alone means the interleaved schedule (as in plan): here too few layers for it.
expect_error '--vp 2 needs at least --pp \* --vp = 4 layers' "${run[@]}" --pp 2 --vp 2
expect_error '--pp 3 is larger than --layers 2' "${run[@]}" --pp 3
expect_error '--pp must be >= 1, got 0' "${run[@]}" --pp 0
expect_error '--stage-layers 3,3,1 sums to 7, not --layers 8' \
  "${run[@]}" --pp 3 --layers 8 --stage-layers 3,3,1
expect_error '--stage-layers 4,4 has 2 entries, but --pp is 3' \
  "${run[@]}" --pp 3 --layers 8 --stage-layers 4,4
expect_error '--stage-layers' "${run[@]}" --pp 2 --stage-layers 1,x
expect_error '--trace /nonexistent-dir/t.json: no directory /nonexistent-dir' \
  "${run[@]}" --pp 2 --trace /nonexistent-dir/t.json
expect_error '--timeline /nonexistent-dir/t.svg: no directory /nonexistent-dir' \
  "${run[@]}" --pp 2 --timeline /nonexistent-dir/t.svg
# ZeRO beside a pipeline runs on any DP size (one rank shards nothing).
expect_output "ZeRO-1" "${run[@]}" --pp 2 --zero 1
finish
