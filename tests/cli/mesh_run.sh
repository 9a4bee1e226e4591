#!/usr/bin/env bash
# `dtrain train` composing DP x TP x PP on the threads backend: the 3D layout table with each
# rank's memory and bytes beside plan/, the node-topology split and its TP warning, JSON, and
# the composed layout's bad input. Usage: mesh_run.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
run=(train --model tiny --steps 2 --eval-every 0 --eval-batches 1)

expect_output '3D layout: DP\(2\) x TP\(2\) x PP\(2\) = 8 ranks' "${run[@]}" --dp 2 --tp 2 --pp 2 --microbatches 2
expect_output 'ZeRO-1' "${run[@]}" --dp 2 --tp 2 --pp 2 --zero 1
expect_output 'every TP, DP and PP group stays inside one node' "${run[@]}" --dp 2 --tp 2 --ranks-per-node 4
expect_output 'warning: TP group \{0,2\} spans nodes \{0,1\}' \
  "${run[@]}" --dp 2 --tp 2 --ranks-per-node 2 --rank-order dp-tp-pp
expect_output '"inter_node"' "${run[@]}" --dp 2 --tp 2 --ranks-per-node 2 --json

expect_error 'the mesh|--ranks-per-node 3 does not divide the 8 ranks' "${run[@]}" --dp 2 --tp 2 --pp 2 --ranks-per-node 3
expect_error '--rank-order "tp-tp-pp"' "${run[@]}" --dp 2 --tp 2 --rank-order tp-tp-pp
expect_error '--zero 3: a composed run' "${run[@]}" --dp 2 --tp 2 --zero 3
expect_error '--sequence-parallel cannot be combined' "${run[@]}" --dp 2 --tp 2 --sequence-parallel
expect_error '--batch 8 does not split into --dp 4 x 4' "${run[@]}" --dp 4 --pp 2 --microbatches 4
expect_error '--backend "gloo" is not one of threads, mpi' "${run[@]}" --dp 2 --backend gloo
expect_error '--ranks-per-node 3 does not divide the 4 ranks' "${run[@]}" --dp 4 --ranks-per-node 3
expect_error '--dp-all-reduce hierarchical needs --zero 0' \
  "${run[@]}" --dp 4 --ranks-per-node 2 --zero 1 --dp-all-reduce hierarchical
expect_error '--dp-all-reduce hierarchical needs --ranks-per-node' \
  "${run[@]}" --dp 2 --tp 2 --ranks-per-node 2 --dp-all-reduce hierarchical
finish
