#!/usr/bin/env bash
# `dtrain train --dp N --zero S` succeeds: the table shows each model-state tag measured beside
# plan::model_state_bytes (equal), DP bytes per step beside the plan, and the overlap share; the
# JSON carries the same figures. Usage: dp_run.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

expect_output 'DP\(4\)-TP\(1\)-PP\(1\)-rank\(0\) ZeRO-3' train --model tiny --steps 3 --eval-every 0 --eval-batches 1 --dp 4 --zero 3
expect_output 'model state \(rank 0\)' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --dp 2 --zero 1
expect_output 'DP bytes sent per step' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --dp 2 --bucket-size 64KiB
expect_output 'overlap: ' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --dp 2 --grad-accum 2
expect_output '"formula_bytes_sent_per_step"' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --dp 2 --zero 2 --json
# Measured == formula: the table marks a tag whose bytes differ; no tag may be marked.
out=$("$DTRAIN" train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --dp 4 --zero 3 2>/dev/null)
if grep -q '(differs)' <<<"$out"; then
  echo "FAIL: a model-state tag differs from plan::model_state_bytes:"
  echo "$out"
  failures=$((failures + 1))
fi
finish
