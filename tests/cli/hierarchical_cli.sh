# The hierarchical all-reduce and --ranks-per-node on the command line: per-rank link bytes beside
# the formula (`dtrain collectives`), the side-by-side sweep (`dtrain bench collectives`), errors.
source "$(dirname "$0")/lib/expect.bash"

expect_output "intra-node +formula +inter-node +formula" collectives --ranks 8 --ranks-per-node 4 \
  --size 1MiB --algo hierarchical --trials 1 --trial-seconds 0.01
# 8 ranks as 2 nodes x 4, S = 1 MiB: every rank sends 2(4-1)/4 S inside its node and
# 2(2-1)/2 S/4 = 262144 bytes across nodes; the flat ring's rank 3 sends 2(8-1)/8 S across.
expect_output "^0 +1572864 +1572864 +262144 +262144" collectives --ranks 8 --ranks-per-node 4 \
  --size 1MiB --algo hierarchical --trials 1 --trial-seconds 0.01
expect_output "^3 +0 +0 +1835008 +1835008" collectives --ranks 8 --ranks-per-node 4 \
  --size 1MiB --algo ring --trials 1 --trial-seconds 0.01
expect_output '"algorithm": "hierarchical"' collectives --ranks 4 --ranks-per-node 2 --size 64KiB \
  --algo hierarchical --trials 1 --trial-seconds 0.01 --json
expect_error "needs --ranks-per-node" collectives --ranks 4 --algo hierarchical
expect_error "is an all_reduce" collectives --ranks 4 --ranks-per-node 2 --op all_gather \
  --algo hierarchical
expect_error "does not divide the 6 ranks" collectives --ranks 6 --ranks-per-node 4

expect_output "hier us +busbw +ratio +ratio all +inter B" bench collectives --ranks 4 --ranks-per-node 2 \
  --min-size 64KiB --max-size 64KiB --trials 1 --trial-seconds 0.01
expect_output '"max_inter_node_bytes": 32768' bench collectives --ranks 4 --ranks-per-node 2 \
  --min-size 64KiB --max-size 64KiB --trials 1 --trial-seconds 0.01 --json
expect_output '"max_inter_node_bytes": 98304' bench collectives --ranks 4 --ranks-per-node 2 \
  --min-size 64KiB --max-size 64KiB --trials 1 --trial-seconds 0.01 --json
expect_output "ranks-per-node" bench collectives --help
expect_error "--algos hierarchical needs --ranks-per-node" bench collectives --algos hierarchical
expect_error "does not divide --ranks 4" bench collectives --ranks 4 --ranks-per-node 3
expect_error "--algos hierarchical is an all_reduce" bench collectives --ranks-per-node 2 \
  --op all_gather
finish
