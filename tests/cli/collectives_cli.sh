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

# Numbers out of range: the bound in plain digits, never CLI11's 300-digit limit; non-finite,
# fractional and huge values refused by name before any rank starts.
expect_error "--trials: must be at least 1 \(got 0\)" collectives --trials 0
expect_error "--trials: must be a whole number \(got 1.5\)" collectives --trials 1.5
expect_error "--trials: must be at most 1000 \(got 99999999999999999999\)" collectives --trials 99999999999999999999
expect_error "--trial-seconds: must be greater than 0 \(got 0\)" collectives --trial-seconds 0
expect_error "--trial-seconds: must be a finite number \(got nan\)" collectives --trial-seconds nan
expect_error "--trial-seconds: must be at most 60 \(got 1e30\)" collectives --trial-seconds 1e30
expect_error "--timeout must be a positive, finite number of seconds \(got inf\)" collectives --timeout inf
expect_error "--ranks: must be a whole number \(got 1e30\)" collectives --ranks 1e30
expect_error "--ranks-per-node: must be at least 1 \(got 0\)" collectives --ranks-per-node 0
expect_error "--root: must be at least 0 \(got -1\)" collectives --root -1
expect_error "--size: '99999999999999999999' is too large" collectives --size 99999999999999999999
expect_error "--size 1TiB on --ranks 2 needs 4 TiB of memory" collectives --size 1TiB
expect_error "--size: '' is not a size" collectives --size ""
expect_error "--trials: must be at least 1 \(got 0\)" bench collectives --trials 0
expect_error "--trial-seconds: must be a finite number \(got inf\)" bench collectives --trial-seconds inf
expect_error "--ranks: must be a whole number \(got \"\"\)" bench collectives --ranks ""
expect_error "--ranks-per-node: must be at least 1 \(got 0\)" bench collectives --ranks-per-node 0
expect_error "--min-size must be at least 4 bytes \(got 0\)" bench collectives --min-size 0
expect_error "--min-size 8KiB is larger than --max-size 4KiB" bench collectives --min-size 8KiB --max-size 4KiB
expect_error "--max-size 8000000TiB on --ranks 4 needs .* of memory" bench collectives --max-size 8000000TiB
expect_error "--rounds: must be at least 1 \(got 0\)" bench collectives --rounds 0
expect_error "--rounds: must be a whole number \(got 1.5\)" bench collectives --rounds 1.5

# --peer (the OpenMPI peer's source, outside this repository): only its error paths run here.
expect_error "--peer /nonexistent/mpi_allreduce.c: no such file" bench collectives --ranks 2 \
  --min-size 4KiB --max-size 4KiB --peer /nonexistent/mpi_allreduce.c
expect_error "--peer: the OpenMPI peer has no broadcast" bench collectives --op broadcast \
  --peer /nonexistent/mpi_allreduce.c
expect_error "--peer needs --backend threads" bench collectives --backend mpi \
  --peer /nonexistent/mpi_allreduce.c
expect_error "--peer" bench collectives --peer ""

# A tiny sweep as JSON: both memcpy figures, the rounds, and both ratios on every row.
json_err=$(mktemp)
json=$("$DTRAIN" bench collectives --ranks 2 --algos ring tree --min-size 4KiB --max-size 16KiB \
  --trials 1 --trial-seconds 0.01 --rounds 2 --json 2>"$json_err")
if python3 - "$json" <<'PY'; then
import json, sys
d = json.loads(sys.argv[1])
assert d["rounds"] == 2, d["rounds"]
assert d["memcpy_GBps"] > 0 and d["memcpy_all_threads_GBps"] > 0, d
assert d["memcpy_threads"] >= 1, d["memcpy_threads"]
assert len(d["round_memcpy_GBps"]) == 2, d["round_memcpy_GBps"]
assert [(r["bytes"], r["algorithm"]) for r in d["rows"]] == [
    (4096, "ring"), (4096, "tree"), (16384, "ring"), (16384, "tree")], d["rows"]
for r in d["rows"]:
    assert len(r["round_time_us"]) == 2, r
    assert r["time_us"] > 0 and r["busbw_GBps"] > 0, r
    assert abs(r["busbw_over_memcpy"] - r["busbw_GBps"] / d["memcpy_GBps"]) < 1e-9, r
    assert abs(r["busbw_over_memcpy_all_threads"] - r["busbw_GBps"] / d["memcpy_all_threads_GBps"]) < 1e-9, r
    assert "peer_time_us" not in r, r
PY
  echo "ok: bench collectives --json carries both memcpy figures, the rounds and both ratios"
else
  echo "FAIL: bench collectives --json, got:"
  head -20 <<<"$json"
  head -5 "$json_err"
  failures=$((failures + 1))
fi
rm -f "$json_err"

# The sweep's table prints each size's row as soon as it is measured (in the last round; one
# round here): while the sweep is still running (it takes minutes to 256 MiB), the first row is
# already out. Polled, not timed, so a loaded machine only makes it slower.
sweep=$(mktemp)
"$DTRAIN" bench collectives --ranks 2 --algos ring --min-size 4KiB --max-size 256MiB \
  --trials 3 --trial-seconds 2 --rounds 1 >"$sweep" 2>/dev/null &
sweep_pid=$!
streamed=no
for _ in $(seq 600); do
  if grep -qE "^4 KiB +[0-9]" "$sweep"; then
    kill -0 "$sweep_pid" 2>/dev/null && streamed=yes
    break
  fi
  sleep 0.1
done
kill "$sweep_pid" 2>/dev/null
wait "$sweep_pid" 2>/dev/null
if [[ $streamed == yes ]]; then
  echo "ok: bench collectives prints rows as it goes"
else
  echo "FAIL: bench collectives printed no row while running, got:"
  head -5 "$sweep"
  failures=$((failures + 1))
fi
rm -f "$sweep"
finish
