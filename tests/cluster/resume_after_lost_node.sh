#!/usr/bin/env bash
# A lost node with nothing lost: a 3D-parallel training job (dp=2 x tp=2 over 2 nodes x 2
# ranks, --backend mpi) saves a checkpoint every few steps; node1's link is cut silently in the
# middle; the job ends naming the lost node. On a fresh cluster `--resume` finishes the run,
# and its final checkpoint (parameters, AdamW moments, step) is byte for byte the one an
# uninterrupted run on the same layout writes.
source "$(dirname "$0")/lib.bash"
require_cluster dtcr
require_mpi
work=$(mktemp -d)
trap '"$CLUSTER" down >/dev/null 2>&1; rm -rf "$work"' EXIT
steps=60
train=(train --model bench --steps "$steps" --eval-every 0 --eval-batches 1 --dp 2 --tp 2
  --backend mpi --ranks-per-node 2)

"$CLUSTER" up --nodes 2 --ranks-per-node 2 --inter-node 1gbit >/dev/null || fail "cluster up"
"$CLUSTER" run --bin "$DTRAIN" -- "${train[@]}" --save "$work/straight" >"$work/straight.log" 2>&1 ||
  { fail "the uninterrupted run failed"; tail -5 "$work/straight.log"; }

# The interrupted run: cut node1 once two checkpoints exist.
"$CLUSTER" run --bin "$DTRAIN" --lost-after 6 -- "${train[@]}" --save "$work/ckpt" --save-every 10 \
  >"$work/cut.log" 2>&1 &
job=$!
for _ in $(seq 1 300); do
  [ "$(ls -d "$work"/ckpt/step-* 2>/dev/null | wc -l)" -ge 2 ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
start=$(date +%s.%N)
"$CLUSTER" cut node1 >/dev/null
wait_bounded $job 60
rc=$job_rc
elapsed=$(seconds_since "$start")
saved=$(cat "$work/ckpt/latest" 2>/dev/null || echo none)
if [ $rc -ne 0 ] && grep -q "lost node1" "$work/cut.log" && [ "$saved" != "step-$(printf %08d $steps)" ]; then
  ok "node1 cut: the job ended in $elapsed s (exit $rc), last checkpoint $saved"
else
  fail "node1 cut: exit $rc after $elapsed s, last checkpoint $saved"
  tail -5 "$work/cut.log"
fi

# A fresh cluster, and the run resumed from the last whole checkpoint.
"$CLUSTER" down >/dev/null
"$CLUSTER" up --nodes 2 --ranks-per-node 2 --inter-node 1gbit >/dev/null || fail "cluster up again"
"$CLUSTER" run --bin "$DTRAIN" -- "${train[@]}" --resume "$work/ckpt" --save "$work/resumed" \
  >"$work/resumed.log" 2>&1 || { fail "the resumed run failed"; tail -5 "$work/resumed.log"; }
final=step-$(printf %08d $steps)
if [ -d "$work/straight/$final" ] && [ -d "$work/resumed/$final" ] &&
  diff -r -I '"id": "[0-9a-f]*"' "$work/straight/$final" "$work/resumed/$final" >/dev/null; then
  ok "resumed from $saved on a fresh cluster: the final checkpoint equals the uninterrupted run's byte for byte"
else
  fail "the resumed run's final checkpoint differs from the uninterrupted run's"
fi
finish
