#!/usr/bin/env bash
# Faults under mpirun, with nothing lost: one rank of a 3D job (dp=2 x tp=2, 4 processes) fails
# before a step (throw, or exits without a word); the job ends within a bounded time with a
# message naming rank 1 and a non-zero exit; `--resume` from the last checkpoint then finishes
# the run, and its final checkpoint is byte for byte the uninterrupted run's.
# Usage: mpi_faults.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(timeout -s KILL 60 mpirun --allow-run-as-root --oversubscribe -np 4)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
train=(train --model tiny --steps 12 --eval-every 0 --eval-batches 1 --dp 2 --tp 2 --backend mpi)

"${MPIRUN[@]}" "$DTRAIN" "${train[@]}" --save "$work/straight" >/dev/null 2>&1 ||
  { echo "FAIL: the uninterrupted run failed"; failures=$((failures + 1)); }

for kind in throw exit; do
  start=$(date +%s)
  out=$("${MPIRUN[@]}" "$DTRAIN" "${train[@]}" --save "$work/$kind" --save-every 4 \
    --inject-fault rank=1,step=7,kind=$kind 2>&1)
  rc=$?
  took=$(($(date +%s) - start))
  if [ $rc -ne 0 ] && [ $rc -ne 137 ] && [ $took -lt 30 ] &&
    grep -qE "rank 1 failed|Process name: \[\[[0-9]+,1\],1\]" <<<"$out"; then
    echo "ok: kind=$kind: exit $rc after ${took} s, naming rank 1"
  else
    echo "FAIL: kind=$kind: exit $rc after ${took} s:"; echo "$out" | tail -5
    failures=$((failures + 1))
  fi
  latest=$(cat "$work/$kind/latest" 2>/dev/null)
  "${MPIRUN[@]}" "$DTRAIN" "${train[@]}" --resume "$work/$kind" --save "$work/$kind-resumed" \
    >/dev/null 2>&1
  # Every byte but the run id (the resumed run is another run, with its own id).
  if diff -r -I '"id": "[0-9a-f]*"' "$work/straight/step-00000012" \
    "$work/$kind-resumed/step-00000012" >/dev/null; then
    echo "ok: kind=$kind: resumed from $latest, final checkpoint equals the uninterrupted run's"
  else
    echo "FAIL: kind=$kind: resumed from '$latest', final checkpoint differs"
    failures=$((failures + 1))
  fi
done
finish
