#!/usr/bin/env bash
# A --save directory belongs to one run: a fresh run refuses another run's checkpoints (unless
# --overwrite), --keep-checkpoints prunes only its own run's, a second writer is refused while
# the first holds the lock (and a killed holder leaves no stale lock), and --resume refuses
# changed optimizer, schedule or data settings unless --allow-resume-changes.
# Usage: train_save_dir.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
cleanup() {
  [[ -n "${holder:-}" ]] && kill -9 "$holder" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
quick=(train --model tiny --eval-every 0 --eval-batches 1)

# Run A (8 steps) writes steps 2, 4, 6 and 8.
A=("${quick[@]}" --steps 8)
"$DTRAIN" "${A[@]}" --save "$tmp/a" --save-every 2 >/dev/null 2>&1 || fail "run A"
[[ -f "$tmp/a/run.json" && -d "$tmp/a/step-00000002" && -d "$tmp/a/step-00000004" ]] ||
  fail "run A did not leave run.json and two checkpoints"
a_manifest=$(cat "$tmp/a/step-00000004/manifest.json")

# A fresh run B into A's directory: refused, nothing touched.
expect_error "--save $tmp/a holds the checkpoints of another run .*--overwrite" "${quick[@]}" \
  --steps 2 --save "$tmp/a"
expect_error "--save $tmp/a holds the checkpoints of another run" "${quick[@]}" --steps 6 \
  --save "$tmp/a" --keep-checkpoints 1 --layers 3
[[ "$(cat "$tmp/a/step-00000004/manifest.json")" == "$a_manifest" ]] || fail "A's checkpoint changed"
[[ -d "$tmp/a/step-00000002" ]] || fail "A's step-2 checkpoint was removed"

# Resuming A into its own directory is A: allowed, and pruning keeps only the newest of A's.
expect_output 'checkpoint written' "${A[@]}" --resume "$tmp/a/step-00000004" --save "$tmp/a" \
  --keep-checkpoints 1
[[ ! -d "$tmp/a/step-00000002" && ! -d "$tmp/a/step-00000006" && -d "$tmp/a/step-00000008" ]] ||
  fail "--keep-checkpoints 1 did not prune A's older checkpoints"

# A foreign checkpoint inside the directory is never pruned as this run's.
"$DTRAIN" "${quick[@]}" --steps 2 --save "$tmp/b" >/dev/null 2>&1 || fail "run B"
cp -r "$tmp/b/step-00000002" "$tmp/a/step-00000003"
expect_output 'checkpoint written' "${quick[@]}" --steps 10 --resume "$tmp/a" --save "$tmp/a" \
  --keep-checkpoints 1 --allow-resume-changes
[[ ! -d "$tmp/a/step-00000008" && -d "$tmp/a/step-00000010" ]] || fail "A's step 8 not pruned"
[[ -d "$tmp/a/step-00000003" ]] || fail "B's checkpoint in A's directory was pruned by A"

# --overwrite hands the directory over: B's checkpoints go when the new run writes its first.
expect_output 'checkpoint written' "${quick[@]}" --steps 2 --save "$tmp/b" --overwrite
grep -q '"step": 2' "$tmp/b/step-00000002/manifest.json" || fail "--overwrite did not write"
[[ "$(grep -o '"id": "[0-9a-f]*"' "$tmp/b/run.json")" == \
  "$(grep -o '"id": "[0-9a-f]*"' "$tmp/b/step-00000002/manifest.json" | head -1)" ]] ||
  fail "run.json and the checkpoint name different runs after --overwrite"

# A second writer while the first holds the lock; then the holder is killed -9: no stale lock.
"$DTRAIN" train --model tiny --steps 100000 --eval-every 0 --eval-batches 1 --save "$tmp/c" \
  >/dev/null 2>&1 &
holder=$!
for _ in $(seq 600); do
  [[ -s "$tmp/c/.lock" ]] && break
  sleep 0.1
done
expect_error "--save $tmp/c is in use by another dtrain run \(pid $holder" "${quick[@]}" \
  --steps 2 --save "$tmp/c" --overwrite
kill -9 "$holder"
wait "$holder" 2>/dev/null
holder=
expect_output 'checkpoint written' "${quick[@]}" --steps 2 --save "$tmp/c" --overwrite

# --resume with other settings than the checkpoint's run: refused, naming each; or overridden.
"$DTRAIN" "${A[@]}" --save "$tmp/d" --save-every 4 >/dev/null 2>&1 || fail "run D"
expect_error "settings differ .*--lr 0.003 -> 0.001.*--allow-resume-changes" "${A[@]}" \
  --resume "$tmp/d/step-00000004" --lr 0.001
expect_error "--warmup 0 -> 1.*--beta2 0.95 -> 0.99" "${A[@]}" --resume "$tmp/d/step-00000004" \
  --beta2 0.99 --warmup 1
expect_error "--steps \(the schedule's length\) 8 -> 12" "${quick[@]}" --steps 12 \
  --resume "$tmp/d/step-00000004"
printf 'other text, long enough to hold a window of the tiny model many times over. %.0s' \
  $(seq 400) >"$tmp/other.txt"
expect_error "settings differ .*--data" "${A[@]}" --resume "$tmp/d/step-00000004" \
  --data "$tmp/other.txt"
expect_output 'resumed at step 4' "${A[@]}" --resume "$tmp/d/step-00000004" --lr 0.001 \
  --allow-resume-changes
finish
