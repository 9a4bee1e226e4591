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
# An all-to-all is priced as one, not as a ring: on 2x8xH100 a rank of 16 sends 15 of its 16
# blocks of 1 GiB / 16, 8 of them to the other node over InfiniBand (50 GB/s per GPU) and 7 over
# NVLink (450 GB/s) at once: 2^29 B / 50 GB/s = 10.74 ms + 8 x 9.6 us = 10.8 ms against the
# NVLink share's 1.0 ms. 10.81 / 12 ms = 90.1% efficient (a ring over InfiniBand: 20.3 ms, 169%).
a2a=(busbw --op alltoall --size 1GiB --ranks 16 --cluster 2x8xH100)
expect_output "ideal +10\.8 ms for an all-to-all: each rank sends 15/16 of S, 8/16 to other nodes over InfiniBand .* while 7/16 stays on NVLink" "${a2a[@]}"
expect_output "the measured time is 90\.1% efficient" "${a2a[@]}" --time-us 12000
expect_output '"model": "all_to_all"' "${a2a[@]}" --json
err=$("$DTRAIN" "${a2a[@]}" --time-us 12000 2>&1 >/dev/null)
[ -z "$err" ] && echo "ok: alltoall at 90% of its ideal: no warning" ||
  fail "alltoall at 90% of its ideal warned: $err"
# Faster than the links allow: a warning that names the all-to-all, never in-network reduction;
# under half the ideal, refused.
err=$("$DTRAIN" "${a2a[@]}" --time-us 9000 2>&1 >/dev/null)
if grep -q "shorter than the ideal all-to-all's 10.8 ms" <<<"$err" && ! grep -q "NVLS" <<<"$err"; then
  echo "ok: alltoall faster than its ideal -> $err"
else
  fail "alltoall at 9 ms: stderr '$err'"
fi
expect_error "--time-us 5000 is less than 1/2 of the 10.8 ms an all-to-all" "${a2a[@]}" --time-us 5000
# Inside one node the all-to-all's ideal is the ring's over NVLink: 7/8 x 2^30 / 450 GB/s = 2.09 ms
# + 7 x 3.4 us = 2.1 ms.
expect_output "ideal +2\.1 ms for an all-to-all inside one node" busbw --op alltoall --size 1GiB --ranks 8 --cluster 1x8xH100
finish
