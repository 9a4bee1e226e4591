# `dtrain collectives --op all_to_all` and the sweep on the threads backend: the result verified
# (block j of rank r lands in block r of rank j), every rank's measured steps and bytes equal to
# the formula columns and to the closed form ((N-1)/N of S; pairwise N-1 steps, direct 2 barriers
# and nothing sent), and bad input refused by name.
source "$(dirname "$0")/lib/expect.bash"

expect_output "all_to_all" collectives --help
expect_output "result verified" collectives --ranks 4 --size 64KiB --op all_to_all --trials 1 --trial-seconds 0.01
expect_output "algorithm direct" collectives --ranks 4 --size 64KiB --op all_to_all --trials 1 --trial-seconds 0.01

# S = 64 KiB on 4 ranks: 16 KiB blocks, three leave each rank (49152 bytes).
for algo in pairwise direct auto; do
  json=$("$DTRAIN" collectives --ranks 4 --size 64KiB --op all_to_all --algo $algo --trials 1 \
    --trial-seconds 0.01 --json 2>&1)
  if python3 - "$json" "$algo" <<'PY'; then
import json, sys
d = json.loads(sys.argv[1])
algo = sys.argv[2]
assert d["verified"] and d["op"] == "all_to_all", d
resolved = "direct" if algo == "auto" else algo
assert d["algorithm"] == resolved, d["algorithm"]
assert abs(d["bus_factor"] - 0.75) < 1e-12, d["bus_factor"]
want = {"pairwise": (3, 49152, 49152), "direct": (2, 0, 49152)}[resolved]
assert len(d["per_rank"]) == 4
for r in d["per_rank"]:
    measured = (r["steps"], r["bytes_sent"], r["bytes_received"])
    formula = (r["formula_steps"], r["formula_bytes_sent"], r["formula_bytes_received"])
    assert measured == want and formula == want, (r, want)
PY
    echo "ok: collectives --op all_to_all --algo $algo: counters = formula on every rank"
  else
    echo "FAIL: collectives --op all_to_all --algo $algo:"; head -20 <<<"$json"
    failures=$((failures + 1))
  fi
done

# all_to_all_v over the bench's uneven parts (0 to 2 blocks, the last rank sending nothing): the
# counters equal plan::all_to_all_v_traffic's on every rank (recomputed here from
# bench::v_part_count), and rank 3 of 4 sends nothing but still receives.
for algo in pairwise direct; do
  json=$("$DTRAIN" collectives --ranks 4 --size 64KiB --op all_to_all_v --algo $algo --trials 1 \
    --trial-seconds 0.01 --json 2>&1)
  if python3 - "$json" "$algo" <<'PY'; then
import json, sys
d = json.loads(sys.argv[1])
algo = sys.argv[2]
assert d["verified"] and d["op"] == "all_to_all_v" and d["algorithm"] == algo, d
block = 4096  # floats
def part(i, j):  # bench::v_part_count
    return 0 if i == 3 else block * 2 * ((i + 2 * j) % 5) // 4
for r in d["per_rank"]:
    q = r["rank"]
    sent = 4 * sum(part(q, j) for j in range(4) if j != q)
    received = 4 * sum(part(i, q) for i in range(4) if i != q)
    want = (3, sent, received) if algo == "pairwise" else (2, 0, received)
    measured = (r["steps"], r["bytes_sent"], r["bytes_received"])
    formula = (r["formula_steps"], r["formula_bytes_sent"], r["formula_bytes_received"])
    assert measured == want and formula == want, (r, want)
assert d["per_rank"][3]["bytes_sent"] == 0 and d["per_rank"][3]["bytes_received"] > 0
PY
    echo "ok: collectives --op all_to_all_v --algo $algo: counters = formula, rank 3 sends nothing"
  else
    echo "FAIL: collectives --op all_to_all_v --algo $algo:"; head -20 <<<"$json"
    failures=$((failures + 1))
  fi
done
expect_error "all_to_all_v has no native path" collectives --ranks 2 --size 4KiB \
  --op all_to_all_v --algo native

expect_error "--size 1000 bytes does not split into 3 equal blocks.*multiple of 4 x --ranks = 12" \
  collectives --ranks 3 --size 1000 --op all_to_all
expect_error "--algo ring: the all-to-all runs pairwise, direct" collectives --ranks 2 --size 4KiB \
  --op all_to_all --algo ring
expect_error "--algo pairwise is the all-to-all's" collectives --ranks 2 --size 4KiB --algo pairwise
expect_error "--algo native: this backend has no collectives of its own" collectives --ranks 2 \
  --size 4KiB --op all_to_all --algo native

# The sweep: all_to_all's own algorithms by default, busbw with nccl-tests' (N-1)/N.
json=$("$DTRAIN" bench collectives --op all_to_all --ranks 2 4 --min-size 4KiB --max-size 16KiB \
  --trials 1 --trial-seconds 0.01 --rounds 1 --json 2>/dev/null)
if python3 - "$json" <<'PY'; then
import json, sys
d = json.loads(sys.argv[1])
assert d["op"] == "all_to_all", d["op"]
got = [(r["np"], r["bytes"], r["algorithm"]) for r in d["rows"]]
want = [(n, s, a) for n in (2, 4) for s in (4096, 16384) for a in ("pairwise", "direct")]
assert got == want, got
for r in d["rows"]:
    assert r["time_us"] > 0 and r["busbw_GBps"] > 0, r
PY
  echo "ok: bench collectives --op all_to_all sweeps pairwise and direct"
else
  echo "FAIL: bench collectives --op all_to_all:"; head -20 <<<"$json"
  failures=$((failures + 1))
fi
expect_output "bench collectives: all_to_all_v.*" bench collectives --op all_to_all_v --ranks 4 \
  --min-size 4KiB --max-size 4KiB --trials 1 --trial-seconds 0.01 --rounds 1
finish
