#!/usr/bin/env bash
# `dtrain train` and `dtrain bench train` succeed on good input: the JSON summary carries the
# figures of the table, the same seed gives the same losses, and the bench prints both rows.
# Usage: train_run.sh path/to/dtrain
set -euo pipefail
dtrain=${1:?usage: $0 path/to/dtrain}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$dtrain" train --model tiny --steps 6 --eval-every 3 --json > "$tmp/a.json" 2> "$tmp/a.err"
"$dtrain" train --model tiny --steps 6 --eval-every 3 --json > "$tmp/b.json" 2> /dev/null
for key in '"final_val"' '"tokens_per_s"' '"activations"' '"peak_bytes"' '"train_losses"'; do
  grep -q "$key" "$tmp/a.json" || { echo "FAIL: JSON summary lacks $key"; exit 1; }
done
grep -q "validation loss" "$tmp/a.err" || { echo "FAIL: no progress on stderr"; cat "$tmp/a.err"; exit 1; }
# Same seed, same run: the loss lists are identical (the timings differ).
a=$(tr -d ' \n' < "$tmp/a.json" | grep -o '"train_losses":\[[^]]*\]')
b=$(tr -d ' \n' < "$tmp/b.json" | grep -o '"train_losses":\[[^]]*\]')
[[ -n "$a" && "$a" == "$b" ]] || { echo "FAIL: same seed, different losses: $a vs $b"; exit 1; }

"$dtrain" train --model tiny --steps 4 --eval-every 0 > "$tmp/table.txt" 2> /dev/null
for word in "at start" "at end" "ln V" "tokens/s" "activations" "peak"; do
  grep -q "$word" "$tmp/table.txt" || { echo "FAIL: table lacks '$word'"; cat "$tmp/table.txt"; exit 1; }
done

"$dtrain" bench train --model tiny --threads 1,2 --blas-threads 2 --warmup 1 --steps 2 --json > "$tmp/bench.json"
# 3 thread rows x 2 precisions (fp32 and bf16 by default).
[[ $(grep -c '"threads"' "$tmp/bench.json") -eq 6 ]] || { echo "FAIL: bench rows"; cat "$tmp/bench.json"; exit 1; }
[[ $(grep -c '"precision": "bf16"' "$tmp/bench.json") -eq 3 ]] || { echo "FAIL: bf16 rows"; exit 1; }
grep -q '"gemm_fraction"' "$tmp/bench.json" || { echo "FAIL: bench lacks gemm_fraction"; exit 1; }
echo ok
