#!/usr/bin/env bash
# `dtrain busbw`: nccl-tests' algbw and busbw from a size, rank count and measured time, the
# ideal ring time on a cluster's links, JSON, and bad input refused naming the flag.
# Usage: busbw.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

# 1 GiB all-reduced by 8 ranks in 6 ms: algbw 2^30 B / 6 ms = 179 GB/s, busbw x 2*7/8 = 313 GB/s.
expect_output "algbw 179 GB/s, busbw 313 GB/s" busbw --op all_reduce --size 1GiB --ranks 8 --time-us 6000
expect_output "busbw = algbw x 0.8750" busbw --op alltoall --size 1GiB --ranks 8 --time-us 6000
expect_output "ideal .* on a ring over NVLink \(450 GB/s" busbw --size 1GiB --ranks 8 --cluster 1x8xH100
expect_output "ring over InfiniBand" busbw --op all_gather --size 1GiB --ranks 16 --cluster 2x8xH100
expect_output '"busbw"' busbw --size 1GiB --ranks 8 --time-us 6000 --json
expect_output "busbw" busbw --help
expect_error "--op must be one of all_reduce, reduce_scatter, all_gather, broadcast, reduce, alltoall" \
  busbw --op allreduce --size 1GiB --ranks 8 --time-us 10
expect_error "give --time-us .* or --cluster" busbw --size 1GiB --ranks 8
expect_error "--size: 'lots' is not a size" busbw --size lots --ranks 8 --time-us 10
expect_error "--ranks: must be at least 1" busbw --size 1GiB --ranks 0 --time-us 10
finish
