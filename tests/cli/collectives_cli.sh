# `dtrain collectives` and `dtrain bench collectives`: help, JSON output, and bad input giving a
# clear error that names the flag, with a non-zero exit.
source "$(dirname "$0")/lib/expect.bash"

expect_output "--ranks" collectives --help
expect_output "--size" collectives --help
expect_output "--algo" collectives --help
expect_output "--max-size" bench collectives --help

# One small run of each collective: verified, with per-rank formula columns.
for op in all_reduce reduce_scatter all_gather broadcast reduce; do
  expect_output "result verified" collectives --ranks 3 --size 4KiB --op "$op" --trials 1 --trial-seconds 0.01
done
expect_output '"busbw_GBps"' collectives --ranks 4 --size 1MiB --algo tree --trials 1 --trial-seconds 0.01 --json
expect_output '"formula_bytes_sent": 1572864' collectives --ranks 4 --size 1MiB --algo ring --trials 1 --trial-seconds 0.01 --json

expect_error "--ranks" collectives --ranks 0
expect_error "--size.*12XB" collectives --size 12XB
expect_error "--size.*not a size" collectives --size MiB
expect_error "--size.*multiple of 4" collectives --size 10
expect_error "--op.*unknown collective 'all_sum'" collectives --op all_sum
expect_error "--algo.*unknown algorithm 'star'" collectives --algo star
expect_error "--root 5" collectives --ranks 2 --op broadcast --root 5 --size 4KiB
expect_error "--algos" bench collectives --algos star
finish
