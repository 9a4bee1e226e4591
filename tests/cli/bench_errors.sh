# `dtrain bench train`, `bench dp` and `bench plan` on bad input: every numeric flag refused by
# name when zero where that means nothing, negative, fractional or huge, and every path checked
# before the benchmark starts, each with a non-zero exit. Nothing here runs a benchmark.
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# bench train: OpenBLAS's own complaint and "inf %" were what --sgemm-size -1 and 0 gave.
expect_error "--sgemm-size: must be at least 1 \(got -1\)" bench train --sgemm-size -1
expect_error "--sgemm-size: must be at least 1 \(got 0\)" bench train --sgemm-size 0
expect_error "--sgemm-size: must be at most 8192 \(got 99999999999999999999\)" \
  bench train --sgemm-size 99999999999999999999
expect_error "--global-batch: must be at least 1 \(got 0\)" bench train --global-batch 0
expect_error "--global-batch: must be at most 1000000 \(got 1000000000\)" bench train --global-batch 1000000000
expect_error "--model bench with --global-batch 1000000 and --sgemm-size 512 needs .* TiB of memory" \
  bench train --model bench --global-batch 1000000
expect_error "--steps: must be at least 1 \(got 0\)" bench train --steps 0
expect_error "--steps: must be at most 100000 \(got 99999999999999999999\)" \
  bench train --steps 99999999999999999999
expect_error "--warmup: must be at least 0 \(got -1\)" bench train --warmup -1
expect_error "--warmup: must be a whole number \(got 1e30\)" bench train --warmup 1e30
expect_error "--threads: must be at least 1 \(got 0\)" bench train --threads 0
expect_error "--threads: must be a whole number \(got \"\"\)" bench train --threads ""
expect_error "--threads: must be at most 64 \(got 99999\)" bench train --threads 1,99999
expect_error "--blas-threads: must be at least 0 \(got -1\)" bench train --blas-threads -1
expect_error "--model: unknown preset ''" bench train --model ""

# bench dp: a --peer that is not there fails now, not after minutes of our own rows.
expect_error "--peer $tmp/missing.py: no such file" bench dp --peer "$tmp/missing.py"
expect_error "--peer $tmp: is a directory" bench dp --peer "$tmp"
expect_error "--peer is empty" bench dp --peer ""
expect_error "--dp-algo \"tree\" is not one of auto, ring, direct" bench dp --dp-algo ring,tree --steps 1 --warmup 0 --rounds 1
touch "$tmp/peer.py"
expect_error "--python $tmp/none/python3: no such file" bench dp --peer "$tmp/peer.py" \
  --python "$tmp/none/python3"
expect_error "--python is empty" bench dp --peer "$tmp/peer.py" --python ""
expect_error "--python python3 applies only with --peer" bench dp --python python3
expect_error "--ranks: must be at least 2 \(got 1\)" bench dp --ranks 1
expect_error "--ranks: must be at most 1024 \(got 99999999999999999999\)" \
  bench dp --ranks 99999999999999999999
expect_error "--batch-per-rank: must be at least 1 \(got 0\)" bench dp --batch-per-rank 0
expect_error "--steps: must be at most 100000 \(got 99999999999999999999\)" \
  bench dp --steps 99999999999999999999
expect_error "--rounds: must be at least 1 \(got 0\)" bench dp --rounds 0
expect_error "--warmup: must be at least 0 \(got -1\)" bench dp --warmup -1
expect_error "--zero: must be at most 3 \(got 4\)" bench dp --zero 1,4
expect_error "--bucket-size must be at least 1 byte \(got 0\)" bench dp --bucket-size 0
expect_error "--bucket-size: '-1' is not a size" bench dp --bucket-size -1
expect_error "--model tiny on --ranks 1024 with --batch-per-rank 1000000 needs .* of memory" \
  bench dp --model tiny --ranks 1024 --batch-per-rank 1000000

# bench plan
expect_error "--repeats: must be at least 1 \(got 0\)" bench plan --repeats 0
expect_error "--repeats: must be at most 1000 \(got 100000\)" bench plan --repeats 100000
expect_error "--cluster $tmp/none.json: no such file" bench plan --cluster "$tmp/none.json"
expect_error "--cluster is empty" bench plan --cluster ""
finish
