#!/usr/bin/env bash
# `dtrain pipeline` output: the issue's figures for P = 8 (7/15 = 46.7% at M = 8, 7/71 = 9.9%
# at M = 64), the simulated bubble equal to the closed form for every schedule, and the --json,
# --svg and --trace outputs. Every expected number is computed here from P, M and v.
# Usage: pipeline_output.sh path/to/dtrain
set -u
dtrain=$1
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect_line <output> <regex>: some line of the output matches.
expect_line() {
  if ! grep -Eq -- "$2" <<<"$1"; then
    fail "no line matches: $2"
    echo "$1" | sed 's/^/  | /'
  fi
}

percent() { awk -v x="$1" 'BEGIN { printf "%.1f%%", 100 * x }'; }

# GPipe and 1F1B: (P-1)/(M+P-1) of the total, (P-1)/M of the ideal, simulated == closed form.
for schedule in 1f1b gpipe; do
  for m in 8 64; do
    p=8
    out=$("$dtrain" pipeline --stages $p --microbatches $m --schedule $schedule) ||
      fail "$schedule P=$p M=$m exited non-zero"
    total=$(percent "$(awk -v p=$p -v m=$m 'BEGIN { print (p - 1) / (m + p - 1) }')")
    ideal=$(percent "$(awk -v p=$p -v m=$m 'BEGIN { print (p - 1) / m }')")
    expect_line "$out" "^bubble of total .* $total +plan $total +\(P-1\)/\(M\+P-1\) = $((p - 1))/$((m + p - 1))$"
    expect_line "$out" "^bubble of ideal .* $ideal +plan $ideal +\(P-1\)/M = $((p - 1))/$m$"
    expect_line "$out" "^checker: valid"
    expect_line "$out" "^rank 7 +\|"
  done
done
# The issue's two figures, spelled out.
out=$("$dtrain" pipeline --stages 8 --microbatches 8 --schedule 1f1b)
expect_line "$out" "46\.7% +plan 46\.7% +\(P-1\)/\(M\+P-1\) = 7/15"
out=$("$dtrain" pipeline --stages 8 --microbatches 64 --schedule 1f1b)
expect_line "$out" " 9\.9% +plan 9\.9% +\(P-1\)/\(M\+P-1\) = 7/71"

# Interleaved: (P-1)/(v*M+P-1); ZB-H1 at equal F, B, W: simulated == plan.
p=4 m=8 v=2
out=$("$dtrain" pipeline --stages $p --microbatches $m --schedule interleaved --vp $v)
total=$(percent "$(awk -v p=$p -v m=$m -v v=$v 'BEGIN { print (p - 1) / (v * m + p - 1) }')")
expect_line "$out" "^bubble of total .* $total +plan $total +\(P-1\)/\(v\*M\+P-1\) = $((p - 1))/$((v * m + p - 1))$"
out=$("$dtrain" pipeline --stages $p --microbatches $m --schedule zb-h1)
# bubble (P-1)(F+B-W) = P-1 units against M(F+B+W) = 3M units of work.
total=$(percent "$(awk -v p=$p -v m=$m 'BEGIN { print (p - 1) / (3 * m + p - 1) }')")
expect_line "$out" "^bubble of total .* $total +plan $total "

# Per-rank peak in-flight equals the plan's figure, min(P - rank, M) for 1F1B.
out=$("$dtrain" pipeline --stages 4 --microbatches 2 --schedule 1f1b)
for r in 0 1 2 3; do
  peak=$((4 - r < 2 ? 4 - r : 2))
  expect_line "$out" "^$r +[0-9-]+ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +$peak \($peak\)"
done

# --json: the same figures, machine-readable.
json=$("$dtrain" pipeline --stages 8 --microbatches 8 --json)
expect_line "$json" '"schedule": "1f1b"'
expect_line "$json" '"valid": true'
frac=$(sed -n 's/.*"bubble_fraction_of_total": \([0-9.e-]*\).*/\1/p' <<<"$json" | head -1)
awk -v f="$frac" 'BEGIN { exit !(f > 7 / 15 - 1e-12 && f < 7 / 15 + 1e-12) }' ||
  fail "--json bubble_fraction_of_total is '$frac', expected 7/15"

# --json --actions: every rank's ordered action list, the same labels as the table's.
json=$("$dtrain" pipeline --stages 2 --microbatches 2 --json --actions) ||
  fail "--json --actions exited non-zero"
listed=$(/usr/bin/python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
bad = ["rank %d lists %d of %d actions" % (r["rank"], len(r.get("action_list", [])), r["actions"])
       for r in j["ranks"] if len(r.get("action_list", [])) != r["actions"] or r["actions"] == 0]
print("; ".join(bad) or "ok")' <<<"$json")
[[ $listed == ok ]] || fail "--json --actions: $listed"
text_rank0=$("$dtrain" pipeline --stages 2 --microbatches 2 --actions | sed -n 's/^rank 0: //p')
json_rank0=$(/usr/bin/python3 -c '
import json, sys; print(" ".join(json.loads(sys.stdin.read())["ranks"][0]["action_list"]))' <<<"$json")
[[ -n $text_rank0 && $text_rank0 == "$json_rank0" ]] ||
  fail "--json --actions rank 0 '$json_rank0' differs from the table's '$text_rank0'"
echo "ok: --json --actions lists rank 0's actions: $json_rank0"

# Interleaved with M not a multiple of P: the measured peak in-flight equals the plan column on
# every rank (P = 4, M = 6, v = 2 and P = 3, M = 7, v = 3).
for pmv in "4 6 2" "3 7 3" "4 10 2"; do
  read -r p m v <<<"$pmv"
  out=$("$dtrain" pipeline --stages $p --microbatches $m --schedule interleaved --vp $v --json)
  diff=$(/usr/bin/python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
print(" ".join("%d:%s!=%s" % (r["rank"], r["peak_inflight"], r["plan_peak_inflight"])
               for r in j["ranks"] if abs(r["peak_inflight"] - r["plan_peak_inflight"]) > 1e-9))' <<<"$out")
  [[ -z $diff ]] || fail "interleaved P=$p M=$m v=$v: measured != plan peak in-flight on $diff"
done

# --svg and --trace: one forward box per (rank, micro-batch), a trace event list.
p=4 m=3
"$dtrain" pipeline --stages $p --microbatches $m --svg "$tmp/t.svg" --trace "$tmp/t.json" \
  >/dev/null || fail "--svg/--trace run exited non-zero"
[[ $(head -c 4 "$tmp/t.svg") == "<svg" ]] || fail "--svg did not write an SVG"
boxes=$(grep -o '<rect class="forward"' "$tmp/t.svg" | wc -l)
[[ $boxes -eq $((p * m)) ]] || fail "--svg has $boxes forward boxes, expected $((p * m))"
grep -q '"traceEvents"' "$tmp/t.json" || fail "--trace did not write trace events"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all pipeline output checks passed"
