#!/usr/bin/env bash
# `dtrain plan`'s tables follow their content: a figure wider than its column's usual width
# widens the column instead of running into the next one; and a calibrated CPU's peak prints in
# the unit that fits (its fastest measured product), never as "0 TFLOP/s".
# Usage: plan_tables.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# GPT-3 175B with 1-byte gradient buckets: billions of DP calls, a time past 10^5 s. Every cell
# of the traffic table's DP row stays apart from its neighbours (at least one space between).
out=$("$DTRAIN" plan --model gpt3-175b --cluster 128x8xH100 --tp 8 --pp 16 --dp 8 --bucket-size 1B 2>&1) ||
  fail "plan --bucket-size 1B exited $?"
row=$(grep -E "^  DP +all_reduce +gradients" <<<"$out")
if grep -qE "^  DP +all_reduce +gradients +8 +InfiniBand \(8 nodes\) +[0-9.]+ GB +[0-9,]+ +[0-9.]+ s +[0-9.]+ s$" <<<"$row"; then
  echo "ok: the DP row's cells are apart: $row"
else
  fail "the DP row runs columns together: '$row'"
fi
# The header's columns line up with the rows': "calls" starts where the calls do.
header=$(grep -E "^  group +collective" <<<"$out")
calls_at=$(python3 -c 'import sys; print(sys.argv[1].index("calls"))' "$header")
count_at=$(python3 -c 'import re, sys; print(re.search(r" (\d,\d{3},)", sys.argv[1]).start(1))' "$row")
[ "$calls_at" = "$count_at" ] && echo "ok: 'calls' heads its column ($calls_at)" ||
  fail "'calls' at $calls_at, the DP row's count at $count_at"

# A calibrated CPU (links and products measured quickly on this machine).
"$DTRAIN" calibrate --ranks 4 --ranks-per-node 2 --seconds 0.01 --trials 1 --iterations 5 \
  --size 1MiB --compute --quick -o "$tmp/cpu.json" >/dev/null 2>&1 || fail "calibrate exited $?"
model=(--layers 2 --hidden 64 --heads 4 --vocab 256 --seq-length 64 --dp 4 --global-batch 8)
out=$("$DTRAIN" plan --cluster "$tmp/cpu.json" "${model[@]}" 2>&1) || fail "plan on the CPU file exited $?"
# Its peak is the file's gpu.peak_flops, printed with three significant figures in its unit.
peak=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['gpu']['peak_flops'])" "$tmp/cpu.json")
want=$(python3 - "$peak" <<'PY'
import sys
v = float(sys.argv[1])
for unit in ["FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s"]:
    d = 0 if abs(v) >= 99.95 else 1 if abs(v) >= 9.995 else 2
    if abs(float(f"{v:.{d}f}")) < 1000:
        print(f"{v:.{d}f} {unit}")
        break
    v /= 1000
PY
)
grep -q "^cluster .*, $want peak (the fastest product measured by calibrate" <<<"$out" &&
  echo "ok: the CPU's peak reads $want" || fail "no '$want peak' in: $(grep '^cluster' <<<"$out")"
grep -q "of its $want measured peak" <<<"$out" && echo "ok: throughput against $want" ||
  fail "throughput line: $(grep 'throughput' <<<"$out")"
grep -q " 0 TFLOP/s" <<<"$out" && fail "a zero peak is printed" || echo "ok: no 0 TFLOP/s"
finish
