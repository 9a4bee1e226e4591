#!/usr/bin/env bash
# `dtrain train` with bad data-parallel flags: each case exits non-zero with an error naming the
# flag at fault. Usage: dp_errors.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

expect_error '--dp 3 does not divide the global batch 8' train --model tiny --steps 1 --dp 3
expect_error '--dp must be at least 1' train --model tiny --steps 1 --dp 0
expect_error '--zero must be 0, 1, 2 or 3 \(got 4\)' train --model tiny --steps 1 --dp 2 --zero 4
expect_error '--zero must be 0, 1, 2 or 3 \(got -1\)' train --model tiny --steps 1 --zero -1
expect_error '--bucket-size must be positive' train --model tiny --steps 1 --dp 2 --bucket-size 0
expect_error '--bucket-size' train --model tiny --steps 1 --dp 2 --bucket-size lots
expect_error '--grad-accum 3 does not divide the 4 sequences per rank' \
  train --model tiny --steps 1 --dp 2 --grad-accum 3
expect_error '--grad-accum must be at least 1' train --model tiny --steps 1 --grad-accum 0
finish
