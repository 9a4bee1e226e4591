#!/usr/bin/env bash
# `dtrain train --tp N --sequence-parallel` runs and its summary shows the f/g bytes per step
# beside plan::tp_traffic_per_layer (reduce-scatters + all-gathers) and one block's measured
# activation bytes beside plan::activation_bytes_per_layer. Usage: sp_run.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

expect_output 'sequence parallel' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --tp 2 --sequence-parallel
expect_output 'reduce-scatters \+ 4 all-gathers' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --tp 2 --sequence-parallel
expect_output 'activations per block per rank: [0-9]+ bytes measured, plan::activation_bytes_per_layer [0-9]+ \(sequence parallel\)' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --tp 4 --sequence-parallel
expect_output '"regather_bytes_sent_per_step"' train --model tiny --steps 2 --eval-every 0 --eval-batches 1 --tp 2 --sequence-parallel --json
finish
