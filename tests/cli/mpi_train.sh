#!/usr/bin/env bash
# `dtrain train --backend mpi` under mpirun gives the same per-step losses as the same layout
# on the threads backend (the same algorithms run in the same order, so bit for bit), prints
# once, and fails clearly outside mpirun or with the wrong process count.
# Usage: mpi_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
run=(train --model tiny --steps 3 --eval-every 0 --eval-batches 1 --json)

# The "train_losses" array of a JSON summary, on one line.
losses() { tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]'; }

for layout in "--dp 2 --tp 2 --pp 2 --microbatches 2 --zero 1" "--dp 4 --tp 2 --zero 2" \
  "--tp 2 --pp 4 --microbatches 4 --layers 4" "--dp 8 --zero 3 --bucket-size 16KiB" \
  "--dp 2 --tp 2 --pp 2 --microbatches 2 --layers 4 --zero 3 --sequence-parallel --recompute full --schedule zb-h1" \
  "--dp 2 --tp 2 --pp 2 --microbatches 2 --zero 3 --sequence-parallel --precision bf16 --grad-reduce bf16"; do
  # shellcheck disable=SC2086
  threads=$("$DTRAIN" "${run[@]}" $layout 2>/dev/null | losses)
  # shellcheck disable=SC2086
  mpi_out=$("${MPIRUN[@]}" -np 8 "$DTRAIN" "${run[@]}" $layout --backend mpi 2>/dev/null)
  mpi=$(losses <<<"$mpi_out")
  summaries=$(grep -c '"train_losses"' <<<"$mpi_out")
  if [ -n "$threads" ] && [ "$threads" = "$mpi" ] && [ "$summaries" = 1 ]; then
    echo "ok: $layout: mpirun -np 8 --backend mpi losses == threads: $mpi"
  else
    echo "FAIL: $layout: threads $threads, mpi $mpi ($summaries summaries)"
    failures=$((failures + 1))
  fi
done

expect_error "not started by mpirun|mpirun" "${run[@]}" --dp 2 --tp 2 --backend mpi
out=$("${MPIRUN[@]}" -np 2 "$DTRAIN" "${run[@]}" --dp 2 --tp 2 --backend mpi 2>&1)
if [ $? -ne 0 ] && grep -q "needs 4 ranks but mpirun started only 2" <<<"$out"; then
  echo "ok: too few processes: $(grep -m1 'needs 4' <<<"$out")"
else
  echo "FAIL: too few processes:"; echo "$out" | tail -3
  failures=$((failures + 1))
fi
finish
