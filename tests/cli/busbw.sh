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
# Ranks the cluster does not have, and a measured time no link could achieve, are refused; a
# busbw between the link's bandwidth and twice it (in-network reduction) is a warning.
expect_error "--ranks 128 is more than the 8 GPUs of --cluster 1x8xH100" busbw --size 1GiB --ranks 128 --cluster 1x8xH100
expect_error "--ranks 1000000 is more than the 8 GPUs" busbw --size 1GiB --ranks 1000000 --cluster 1x8xH100 --time-us 100
expect_error "--time-us 1 gives a busbw of .*, more than 2x the 450 GB/s of NVLink" \
  busbw --size 1GiB --ranks 8 --cluster 1x8xH100 --time-us 1
# 2^30 B x 7/4 in 3 ms = 626 GB/s: above NVLink's 450, below twice it.
err=$("$DTRAIN" busbw --size 1GiB --ranks 8 --cluster 1x8xH100 --time-us 3000 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 0 ] && grep -q "warning: the measured busbw 626 GB/s exceeds NVLink's 450 GB/s" <<<"$err"; then
  echo "ok: busbw 626 GB/s over NVLink's 450 -> exit 0 with a warning: $err"
else
  echo "FAIL: busbw above the link: exit $rc, stderr '$err'"
  failures=$((failures + 1))
fi
finish
