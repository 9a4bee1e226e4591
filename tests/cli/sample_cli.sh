#!/usr/bin/env bash
# `dtrain sample`: from a checkpoint saved by DP 2 + ZeRO-3 (and by TP 2 x PP 2), the same --seed
# prints the same bytes and another seed others; --temperature 0 prints the same bytes whatever
# the seed, equal to --top-k 1; the JSON carries the bytes as tokens; generation runs past the
# context; bad values are refused naming the flag. Usage: sample_cli.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$DTRAIN" train --model tiny --steps 40 --eval-every 0 --dp 2 --zero 3 --save "$tmp/z3" > /dev/null 2>&1 ||
  { echo "FAIL: train --dp 2 --zero 3 --save"; exit 1; }
"$DTRAIN" train --model tiny --steps 40 --eval-every 0 --tp 2 --pp 2 --save "$tmp/tp" > /dev/null 2>&1 ||
  { echo "FAIL: train --tp 2 --pp 2 --save"; exit 1; }

same() {  # same DESCRIPTION A B: the two outputs are equal (and not empty)
  if [[ -n "$2" && "$2" == "$3" ]]; then echo "ok: $1"; else
    echo "FAIL: $1: '$2' vs '$3'"; failures=$((failures + 1)); fi
}
differ() {
  if [[ -n "$2" && "$2" != "$3" ]]; then echo "ok: $1"; else
    echo "FAIL: $1: both '$2'"; failures=$((failures + 1)); fi
}
s() { "$DTRAIN" sample "$@" 2>/dev/null; }

for ck in z3 tp; do
  a=$(s --checkpoint "$tmp/$ck" --prompt "The " --tokens 60 --seed 5)
  b=$(s --checkpoint "$tmp/$ck" --prompt "The " --tokens 60 --seed 5)
  c=$(s --checkpoint "$tmp/$ck" --prompt "The " --tokens 60 --seed 6)
  same "$ck: --seed 5 twice gives the same bytes" "$a" "$b"
  differ "$ck: --seed 6 gives other bytes" "$a" "$c"
  g1=$(s --checkpoint "$tmp/$ck" --prompt "The " --tokens 60 --temperature 0 --seed 1)
  g2=$(s --checkpoint "$tmp/$ck" --prompt "The " --tokens 60 --temperature 0 --seed 2)
  k1=$(s --checkpoint "$tmp/$ck" --prompt "The " --tokens 60 --top-k 1 --seed 3)
  same "$ck: --temperature 0 ignores the seed" "$g1" "$g2"
  same "$ck: --temperature 0 equals --top-k 1" "$g1" "$k1"
done
expect_output '"window_restarts": [1-9]' sample --checkpoint "$tmp/z3" --tokens 100 --json
expect_output '"tokens": \[' sample --checkpoint "$tmp/z3/step-00000040" --tokens 5 --json
expect_output 'KV cache' sample --help
expect_error "--checkpoint" sample --tokens 5
expect_error "--checkpoint $tmp/none|no such directory" sample --checkpoint "$tmp/none"
expect_error "--temperature" sample --checkpoint "$tmp/z3" --temperature -1
expect_error "--top-k" sample --checkpoint "$tmp/z3" --top-k -1
expect_error "--tokens" sample --checkpoint "$tmp/z3" --tokens 0
expect_error "--prompt of 40 bytes|context of 32" sample --checkpoint "$tmp/z3" --prompt "$(printf 'a%.0s' {1..40})"
# An empty --prompt is refused in words that say why (the model has no start token).
expect_error '--prompt is empty: the model has no start token' sample --checkpoint "$tmp/z3" --prompt ""
# The text streams: the first bytes are on stdout while generation still runs.
"$DTRAIN" sample --checkpoint "$tmp/z3" --prompt "The " --tokens 16000000 > "$tmp/stream.txt" 2>/dev/null &
pid=$!
streamed=no
for _ in $(seq 1 100); do
  if [ "$(wc -c < "$tmp/stream.txt")" -gt 20 ]; then
    kill -0 $pid 2>/dev/null && streamed=yes
    break
  fi
  sleep 0.1
done
kill $pid 2>/dev/null
wait $pid 2>/dev/null
if [ $streamed = yes ]; then
  echo "ok: sample prints as it generates ($(head -c 30 "$tmp/stream.txt" | tr -c '[:print:]' '.')...)"
else
  echo "FAIL: sample printed nothing while it ran"
  failures=$((failures + 1))
fi
finish
