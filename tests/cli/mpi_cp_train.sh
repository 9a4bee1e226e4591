#!/usr/bin/env bash
# `dtrain train --cp` under mpirun --backend mpi gives the same per-step losses as the threads
# backend, bit for bit (the ring's hops, the ring all-gather / reduce-scatter and the pairwise
# all-to-alls run the same steps in the same order on both; under bf16 K/V travel as bf16 on
# both), and a process count that does not
# fit dp x cp x tp x pp is refused naming both. Usage: mpi_cp_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
run=(train --model tiny --steps 3 --eval-every 0 --eval-batches 1 --json)

losses() { tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]'; }

for layout in "--cp 2 --dp 2 --tp 2 --sequence-parallel" "--cp 4 --dp 2 --cp-algo all-gather --zero 3" \
  "--cp 2 --tp 2 --pp 2 --microbatches 2 --cp-algo ulysses --recompute full" \
  "--cp 4 --dp 2 --precision bf16" "--cp 2 --dp 2 --zero 2 --pp 2 --microbatches 2 --schedule zb-h1 --cp-algo all-gather --precision bf16"; do
  # shellcheck disable=SC2086
  threads=$("$DTRAIN" "${run[@]}" $layout 2>/dev/null | losses)
  # shellcheck disable=SC2086
  mpi_out=$("${MPIRUN[@]}" -np 8 "$DTRAIN" "${run[@]}" $layout --backend mpi 2>/dev/null)
  mpi=$(losses <<<"$mpi_out")
  if [ -n "$threads" ] && [ "$threads" = "$mpi" ]; then
    echo "ok: $layout: mpirun -np 8 --backend mpi losses == threads: $mpi"
  else
    fail "$layout: threads $threads, mpi $mpi"
  fi
done

out=$("${MPIRUN[@]}" -np 2 "$DTRAIN" "${run[@]}" --cp 4 --backend mpi 2>&1)
if [ $? -ne 0 ] && grep -q "\-\-cp 4 x --tp 1 x --pp 1 needs 4 ranks but mpirun started only 2" <<<"$out"; then
  echo "ok: --cp 4 on 2 processes: $(grep -m1 'needs 4' <<<"$out")"
else
  fail "--cp 4 on 2 processes:"
  echo "$out" | tail -3
fi
finish
