#!/usr/bin/env bash
# What users read: `dtrain help [COMMAND [SUBCOMMAND]]` prints what --help prints and refuses an
# unknown name with the list of commands; no help text speaks of the project's workings (a
# ../shared path, "the issue"); `bench plan` on a one-GPU cluster names the TP it held and why
# instead of failing on a tp=8 the user never gave; `bench collectives` and `bench tokenize`
# report progress while they run, and an interrupted `bench tokenize` leaves no temporary files.
# Usage: help_texts.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus=$(realpath "$(dirname "$0")/../../data/corpus.txt")
check() {  # check DESCRIPTION CONDITION...: the condition (a command) holds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

# `dtrain help` and `dtrain help NAME...` print the same text as --help.
expect_output "Subcommands:" help
expect_output "train .*Train the GPT model" help
for cmd in train plan tokenize "bench plan" "bench tokenize" bench; do
  # shellcheck disable=SC2086
  "$DTRAIN" help $cmd > "$tmp/help.txt" 2>&1
  rc=$?
  # shellcheck disable=SC2086
  "$DTRAIN" $cmd --help > "$tmp/flag.txt" 2>&1
  check "dtrain help $cmd exits 0 (got $rc) and prints what $cmd --help prints" \
    eval "[ $rc -eq 0 ] && cmp -s '$tmp/help.txt' '$tmp/flag.txt'"
done
expect_output "--metrics" help train
expect_error "help: \`nosuch\` is not a dtrain command; the commands are: .*train" help nosuch
expect_error "help: \`bench nosuch\` is not a dtrain command; bench's are: .*tokenize" \
  help bench nosuch
expect_error "help: \`train\` has no subcommands" help train steps
# An unknown command without `help` is named too, with the list.
expect_error "\`nosuch\` is not a dtrain command; the commands are: .*tokenize" nosuch
expect_error "\`bench nosuch\` is not a dtrain command; bench's are: .*collectives" bench nosuch

# No help text names the project's own workings: every command's and subcommand's --help.
commands=$("$DTRAIN" --help | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}')
check "the top level lists commands (got: $(echo $commands))" [ -n "$commands" ]
for c in $commands; do
  "$DTRAIN" "$c" --help >> "$tmp/all_help.txt" 2>&1
  subs=$("$DTRAIN" "$c" --help | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}')
  for s in $subs; do "$DTRAIN" "$c" "$s" --help >> "$tmp/all_help.txt" 2>&1; done
done
check "every help text was read ($(wc -l < "$tmp/all_help.txt") lines)" \
  grep -q "bench/peers/torch_gpt_step.py" "$tmp/all_help.txt"
check "no help text mentions ../shared or the issue" \
  eval "! grep -nE 'shared/|the issue' '$tmp/all_help.txt'"

# bench plan on one GPU: the held search names the TP it used and why; tp=8 is blamed nowhere.
out=$("$DTRAIN" bench plan --cluster 1x1xA100 --repeats 1 2>&1)
rc=$?
check "bench plan --cluster 1x1xA100 exits 0 (got $rc: $(head -c 300 <<<"$out"))" [ $rc -eq 0 ]
check "it holds tp=1 and says the paper's tp=8 needs 8 GPUs per node" \
  grep -q "held at tp=1 (--search --tp 1, the paper's tp=8 needs 8 GPUs per node; this cluster has 1)" \
  <<<"$out"
check "no budget line speaks of an issue" eval "! grep -q issue <<<\"\$out\""
check "no layout fits on one A100, and the report says so" \
  grep -q "search's best: none: no layout fits in" <<<"$out"
expect_output "held at tp=8 \(--search --tp 8, the paper's tp=8\)" bench plan --repeats 1
expect_output '"why": "the paper.s tp=8 needs 8 GPUs per node; this cluster has 4"' \
  bench plan --cluster 1x4xA100 --repeats 1 --json

# bench collectives: rows of earlier rounds show as progress on stderr, the table on stdout.
"$DTRAIN" bench collectives --ranks 2 --algos ring --min-size 4KiB --max-size 16KiB --trials 1 \
  --trial-seconds 0.01 --rounds 2 > "$tmp/coll.out" 2> "$tmp/coll.err"
check "bench collectives: a progress line per row of round 1 on stderr" \
  grep -qE "^round 1 of 2: 2 ranks, 4(\.00)? KiB: ring [0-9.]+ us" "$tmp/coll.err"
check "bench collectives: the table's rows on stdout" grep -qE "^16(\.00)? KiB " "$tmp/coll.out"
"$DTRAIN" bench collectives --ranks 2 --algos ring --min-size 4KiB --max-size 4KiB --trials 1 \
  --trial-seconds 0.01 --rounds 1 --json > "$tmp/coll.json" 2> "$tmp/coll.err"
check "bench collectives --json: progress on stderr, JSON on stdout" \
  eval "grep -q '^round 1 of 1' '$tmp/coll.err' && /usr/bin/python3 -m json.tool '$tmp/coll.json' > /dev/null"

# bench tokenize: each part prints when measured (stderr under --json); temporary files are
# removed at the end and when the run is interrupted.
mkdir "$tmp/t"
TMPDIR="$tmp/t" "$DTRAIN" bench tokenize --corpus "$corpus" --vocab 512 --mb 1 --json > "$tmp/tok.json" 2> "$tmp/tok.err"
check "bench tokenize --json: the parts on stderr as they finish" \
  eval "grep -q '  train: ' '$tmp/tok.err' && grep -q '  encode: ' '$tmp/tok.err'"
check "bench tokenize leaves nothing in the temporary directory" [ -z "$(ls -A "$tmp/t")" ]
for signal in INT TERM; do
  TMPDIR="$tmp/t" "$DTRAIN" bench tokenize --corpus "$corpus" --vocab 512 --mb 200 > /dev/null 2> "$tmp/sig.err" &
  pid=$!
  for _ in $(seq 300); do  # until the repeated text is being written (up to 30 s)
    [ -n "$(find "$tmp/t" -name text.txt -size +1M 2>/dev/null)" ] && break
    sleep 0.1
  done
  kill -$signal $pid
  wait $pid
  rc=$?
  want=$((128 + $(kill -l $signal)))
  check "bench tokenize stopped by SIG$signal: exit $want (got $rc), temporary files removed" \
    eval "[ $rc -eq $want ] && [ -z \"\$(ls -A '$tmp/t')\" ] && grep -q 'temporary files are removed' '$tmp/sig.err'"
done

finish
