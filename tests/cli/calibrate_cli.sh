# `dtrain calibrate`: flags and errors, and a dry run on thread ranks (blocks of --ranks-per-node
# as nodes) whose cluster file `dtrain plan --cluster` reads back.
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_output "intra-node and inter-node links" calibrate --help
expect_error "--backend: unknown backend 'gloo'" calibrate --backend gloo
expect_error "no inter-node link to measure.*--ranks-per-node" calibrate --ranks 2 --seconds 0.01 \
  --trials 1 --iterations 5 --size 4KiB
expect_error "no intra-node link" calibrate --ranks 2 --ranks-per-node 1 --seconds 0.01 --trials 1 \
  --iterations 5 --size 4KiB
expect_error "does not divide the 4 ranks" calibrate --ranks 4 --ranks-per-node 3
expect_error "--gpu: unknown node type 'B200X'" calibrate --gpu B200X
expect_error "--size" calibrate --size 12parsecs

# Numbers refused by name with readable bounds; the output file checked before measuring.
expect_error "--ranks-per-node: must be at least 1 \(got 0\)" calibrate --ranks-per-node 0
expect_error "--ranks: must be at most 1024 \(got 99999999999999999999\)" calibrate --ranks 99999999999999999999
expect_error "--seconds: must be greater than 0 \(got 0\)" calibrate --seconds 0
expect_error "--seconds: must be a finite number \(got inf\)" calibrate --seconds inf
expect_error "--trials: must be at least 1 \(got 0\)" calibrate --trials 0
expect_error "--iterations: must be a whole number \(got 1e30\)" calibrate --iterations 1e30
expect_error "--latency-bytes: must be at least 1 \(got 0\)" calibrate --latency-bytes 0
expect_error "--timeout must be a positive, finite number of seconds \(got nan\)" calibrate --timeout nan
expect_error "--size must be at least 1 byte" calibrate --size 0
expect_error "--size 1TiB on --ranks 4 needs 8 TiB of memory" calibrate --size 1TiB
expect_error "--output $tmp: is a directory" calibrate --ranks 4 --ranks-per-node 2 --output "$tmp"
expect_error "--output is empty" calibrate --ranks 4 --ranks-per-node 2 --output ""
expect_error "--output $tmp/none/c.json: no directory" calibrate --ranks 4 --ranks-per-node 2 \
  --output "$tmp/none/c.json"

expect_output "inter-node .* 2 " calibrate --ranks 4 --ranks-per-node 2 --seconds 0.02 --trials 1 \
  --iterations 10 --size 1MiB --output "$tmp/c.json"
expect_output '"name": "measured inter-node"' plan --cluster "$tmp/c.json" --print-cluster
# A link measured below the bounds plan reads a file with: calibrate refuses to write it, naming
# the field, its value and what to do. 1-byte exchanges between thread ranks read well under the
# 10 MB/s floor (a microsecond or more per byte).
expect_error "field 'intra_node.bandwidth_bytes_per_s' is [0-9.e+]+ bytes/s, outside \\[1e\\+07, .*nothing was written.*quiet machine.*larger --size \\(now 1 B\\)" \
  calibrate --ranks 4 --ranks-per-node 2 --seconds 0.01 --trials 1 --iterations 5 --size 1 \
  --output "$tmp/slow.json"
[ -e "$tmp/slow.json" ] && fail "calibrate wrote $tmp/slow.json though plan would refuse it"
expect_error "nothing was written" calibrate --ranks 4 --ranks-per-node 2 --seconds 0.01 \
  --trials 1 --iterations 5 --size 1 --json
expect_output '"gpus_per_node": 2' calibrate --ranks 6 --ranks-per-node 2 --seconds 0.02 \
  --trials 1 --iterations 10 --size 1MiB --json
finish
