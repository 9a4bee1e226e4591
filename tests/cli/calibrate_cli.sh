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

expect_output "inter-node .* 2 " calibrate --ranks 4 --ranks-per-node 2 --seconds 0.02 --trials 1 \
  --iterations 10 --size 64KiB --output "$tmp/c.json"
expect_output '"name": "measured inter-node"' plan --cluster "$tmp/c.json" --print-cluster
expect_output '"gpus_per_node": 2' calibrate --ranks 6 --ranks-per-node 2 --seconds 0.02 \
  --trials 1 --iterations 10 --size 64KiB --json
finish
