#!/usr/bin/env bash
# `dtrain train` with bad tensor-parallel flags: each case exits non-zero with an error naming
# both values at fault. Usage: tp_errors.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

# tiny: NH = 4, C = 32
expect_error '--tp 3 does not divide n_head 4' train --model tiny --steps 1 --tp 3
expect_error '--tp 8 is larger than n_head 4' train --model tiny --steps 1 --tp 8
expect_error '--tp must be at least 1 \(got 0\)' train --model tiny --steps 1 --tp 0
# NH = 6, C = 6: tp 4 is below NH but does not divide it. (A tp that divides NH divides C, as
# NH does, and so 4C: the 4C check in model::check_tensor_parallel is a guard only.)
expect_error '--tp 4 does not divide n_head 6' train --model tiny --steps 1 --heads 6 --hidden 6 --tp 4
# ZeRO with TP alone runs (a DP group of one rank shards nothing, but every layout takes --zero).
expect_output 'ZeRO-1' train --model tiny --steps 1 --eval-every 0 --eval-batches 1 --tp 2 --zero 1
finish
