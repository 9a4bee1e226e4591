#!/usr/bin/env bash
# `dtrain train --sequence-parallel` with sizes it cannot split: each case exits non-zero with an
# error naming the values at fault. Usage: sp_errors.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

# The B*T token rows are cut into --tp slices: 1 x 7 rows do not split in 2.
expect_error '--tp 2 does not divide --seq-length 7 x --global-batch 1' train --model tiny --steps 1 --global-batch 1 --seq-length 7 --tp 2 --sequence-parallel
expect_error '--sequence-parallel needs --tp of at least 2 \(got --tp 1\)' train --model tiny --steps 1 --sequence-parallel
finish
