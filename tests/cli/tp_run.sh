#!/usr/bin/env bash
# `dtrain train --tp N` runs and its summary shows, per TP rank, the TP bytes sent per step
# measured beside plan::tp_traffic_per_layer x L, and the parameter memory per rank.
# Usage: tp_run.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

expect_output 'tensor parallel: 4 ranks' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --tp 4
expect_output 'plan::tp_traffic_per_layer' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --tp 2
expect_output '"tensor_parallel"' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --tp 2 --json
finish
