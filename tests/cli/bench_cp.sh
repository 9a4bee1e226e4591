#!/usr/bin/env bash
# `dtrain bench cp` (a build with benchmarks): --dp 2 vs --cp 2 at one sequence length on the
# same 2 ranks, tiny sizes. Not a timing test: the JSON carries both rows and the ratios, the CPU
# is named, the CP run holds fewer activation bytes per rank (no attention scores) and its ring
# sends exactly plan/'s bytes (4 K/V blocks per layer: N-1 hops forward, 2N-1 backward at N = 2);
# bad flags are refused naming them. Usage: bench_cp.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! "$DTRAIN" bench cp --help > /dev/null 2>&1; then
  echo "skip: this build has no benchmarks"
  finish
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_output 'Ranks \(= DP ranks of the baseline, CP ranks of the CP run\)' bench cp --help
tiny=(bench cp --seq-length 64 --hidden 16 --layers 2 --global-batch 2 --warmup 0 --steps 1 --rounds 1)
expect_output 'ratio CP / DP: time [0-9.]+, activation peak 0\.[0-9]+' "${tiny[@]}"
expect_output 'CPU: .+' "${tiny[@]}"
if "$DTRAIN" "${tiny[@]}" --json > "$tmp/bench.json" 2> "$tmp/err"; then
  python3 - "$tmp/bench.json" <<'PY' || fail "bench cp figures"
import json, sys
j = json.load(open(sys.argv[1]))
dp, cp = j["data_parallel"], j["context_parallel"]
assert (dp["dp"], dp["cp"], cp["dp"], cp["cp"]) == (2, 1, 1, 2), (dp, cp)
assert j["cpu"] and j["cp_algorithm"] == "ring", j
for row in (dp, cp):
    for key in ("step_ms", "activation_peak_bytes_per_rank", "peak_bytes_per_rank"):
        assert row[key] > 0, (key, row)
assert dp["cp_bytes_per_step"] == 0, dp
m = j["model"]
kv_block = 2 * j["batch"] * (m["seq"] // 2) * m["channels"] * 4  # one rank's K and V, fp32
assert cp["cp_bytes_per_step"] == m["layers"] * 4 * kv_block, (cp, kv_block)
assert cp["activation_peak_bytes_per_rank"] < dp["activation_peak_bytes_per_rank"], (dp, cp)
ratio = cp["activation_peak_bytes_per_rank"] / dp["activation_peak_bytes_per_rank"]
assert abs(j["activation_ratio"] - ratio) < 1e-12, j
assert abs(j["time_ratio"] - cp["step_ms"] / dp["step_ms"]) < 1e-12, j
print(f"ok: bench cp: activation ratio {ratio:.3f}, CP bytes {cp['cp_bytes_per_step']:.0f} "
      f"= {m['layers']} x 4 x {kv_block}, time ratio {j['time_ratio']:.3f}")
PY
else
  fail "bench cp --json exited non-zero: $(cat "$tmp/err")"
fi
expect_error 'bench cp: --ranks 4 does not divide --global-batch 2' "${tiny[@]}" --ranks 4
expect_error '--cp-algo "star" is not one of ring, all-gather, ulysses' "${tiny[@]}" --cp-algo star
expect_error '--ranks' "${tiny[@]}" --ranks 1
finish
