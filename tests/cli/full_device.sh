#!/usr/bin/env bash
# Output that does not fit (a full disk, here /dev/full, where every write fails with ENOSPC) ends
# the command non-zero with a message naming the output and the reason, instead of exit 0: files
# (--write-eval-batch, plot --output, tokenize's output, pipeline --svg, calibrate --output) and
# the stdout of train (--json or not), plan --json, sample, pipeline, plot, tokenize and --help.
# The device is left a device.
# Usage: full_device.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
if [ ! -c /dev/full ]; then
  echo "skipped: /dev/full is not a character device on this machine"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DTRAIN=$(realpath "$(command -v "$DTRAIN")")
corpus=$(realpath "$(dirname "$0")/../../data/corpus.txt")
cd "$tmp" || exit 1
full="No space left on device"
# The file outputs go through a link to /dev/full: a writer that renames a finished file over its
# output, or removes a half-written one, then replaces or removes the link, never the device
# (as root, the device node itself would go).
ln -s /dev/full full

run=(train --model tiny --steps 2 --eval-every 0 --eval-batches 1)
expect_error "--write-eval-batch full: cannot write \($full\)" "${run[@]}" --write-eval-batch full
"$DTRAIN" "${run[@]}" --metrics m.jsonl --save ck > /dev/null 2>&1 || { echo "FAIL: train"; exit 1; }
expect_error "cannot write /dev/full: $full" plot m.jsonl --output /dev/full
expect_error "cannot write /dev/full: $full" pipeline --stages 2 --microbatches 4 --svg /dev/full
head -c 40000 "$corpus" > text.txt
"$DTRAIN" tokenize --train text.txt --vocab 512 --model tok.model > /dev/null 2>&1 ||
  { echo "FAIL: tokenize --train"; exit 1; }
expect_error "output full: cannot be written \($full\)" tokenize --model tok.model text.txt full
expect_error "--output: writing 'full' failed \($full\)" calibrate --ranks 4 --ranks-per-node 2 \
  --seconds 0.01 --trials 1 --iterations 5 --size 4KiB --output full
[ -L full ] && [ -c /dev/full ] && echo "ok: the link and /dev/full are as they were" ||
  fail "full or /dev/full was replaced"

# stdout into the full device: the whole output is lost, so the command fails.
to_full() {  # to_full ARGS...: dtrain ARGS > /dev/full exits non-zero naming stdout and ENOSPC
  local err rc
  err=$("$DTRAIN" "$@" 2>&1 >/dev/full)
  rc=$?
  if [ $rc -ne 0 ] && grep -q "error: stdout: cannot be written ($full)" <<<"$err"; then
    echo "ok: dtrain $* > /dev/full -> exit $rc: $(tail -1 <<<"$err")"
  else
    fail "dtrain $* > /dev/full: exit $rc, stderr: $(tail -2 <<<"$err")"
  fi
}
to_full "${run[@]}" --json
to_full "${run[@]}"
to_full plan --model llama2-70b --cluster 8x8xH100 --tp 8 --pp 2 --json
to_full sample --checkpoint ck --prompt "The " --tokens 20 --seed 1
to_full pipeline --stages 2 --microbatches 4 --svg p.svg
to_full plot m.jsonl --output p2.svg
to_full tokenize --model tok.model text.txt tokens.bin
to_full plan --help
# A command whose stdout is written still exits 0 (the check itself is not the failure).
expect_output "loss" "${run[@]}" --json

finish
