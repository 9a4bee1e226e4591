#!/usr/bin/env bash
# `dtrain bench cp` (a build with benchmarks): --dp 2 vs --cp 2 at one sequence length on the
# same 2 ranks, tiny sizes. Not a timing test: the JSON carries both rows and the ratios, the CPU
# is named, the CP run holds fewer activation bytes per rank (no attention scores) and its ring
# sends exactly plan/'s bytes (4 K/V blocks per layer: N-1 hops forward, 2N-1 backward at N = 2);
# with --kv-heads (a Llama block) the grouped-query CP bytes over the multi-head run's are NKV/NH
# for the ring (only K and V travel) and plan/'s for Ulysses (Q and O travel whole); bad flags are
# refused naming them. Usage: bench_cp.sh path/to/dtrain
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
# Grouped-query attention: 1 K/V head for 4 query heads under the ring, 2 under Ulysses (which
# splits the K/V heads over the 2 CP ranks).
for case in ring:1 ulysses:2; do
  algo=${case%%:*}
  kv=${case#*:}
  "$DTRAIN" "${tiny[@]}" --kv-heads "$kv" --cp-algo "$algo" --json > "$tmp/gqa.json" 2> "$tmp/err" ||
    fail "bench cp --kv-heads $kv --cp-algo $algo: $(cat "$tmp/err")"
  python3 - "$tmp/gqa.json" "$algo" "$kv" <<'PY' || fail "bench cp --kv-heads $kv --cp-algo $algo figures"
import json, sys
j, algo, kv = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
assert j["model"]["family"] == "llama" and j["model"]["kv_heads"] == kv, j["model"]
gqa, mha = j["context_parallel"], j["multi_head_context_parallel"]
assert abs(j["kv_bytes_ratio"] - gqa["cp_bytes_per_step"] / mha["cp_bytes_per_step"]) < 1e-12, j
# ring: [K|V] of kv heads against 4; ulysses: Q (4) + K, V (kv each) + O (4) against 4 x 4.
expected = kv / 4 if algo == "ring" else (4 + kv + kv + 4) / 16
assert abs(j["kv_bytes_ratio"] - expected) < 1e-12, (j["kv_bytes_ratio"], expected)
assert j["kv_bytes_ratio_planned"] == j["kv_bytes_ratio"], j
print(f"ok: bench cp --kv-heads {kv} --cp-algo {algo}: GQA / MHA CP bytes {j['kv_bytes_ratio']:.4f}")
PY
done
expect_error 'bench cp: --ranks 4 does not divide --global-batch 2' "${tiny[@]}" --ranks 4
expect_error '--cp-algo "star" is not one of ring, all-gather, ulysses' "${tiny[@]}" --cp-algo star
expect_error '--ranks' "${tiny[@]}" --ranks 1
finish
