#!/usr/bin/env bash
# Out of memory under mpirun: one rank of a --dp 2 job throws std::bad_alloc before step 3
# (--inject-fault kind=bad_alloc, as an allocation past a memory limit would); the job ends
# non-zero within seconds, no process left hanging, with the "out of memory" sizing message
# naming the rank instead of a bare std::bad_alloc. (The threads backend: memory_limits.sh.)
# Usage: mpi_out_of_memory.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(timeout -s KILL 60 mpirun --allow-run-as-root --oversubscribe -np 2)
train=(train --model tiny --steps 5 --eval-every 0 --eval-batches 1 --dp 2 --backend mpi)

start=$(date +%s)
out=$("${MPIRUN[@]}" "$DTRAIN" "${train[@]}" --inject-fault rank=1,step=3,kind=bad_alloc 2>&1)
rc=$?
took=$(($(date +%s) - start))
if [[ $rc -ne 0 && $rc -ne 137 && $took -lt 30 ]] &&
  grep -q "^error: rank 1 failed: out of memory: an allocation failed (std::bad_alloc).*use a smaller --global-batch" \
    <<<"$out"; then
  echo "ok: mpirun -np 2 dtrain ${train[*]} --inject-fault rank=1,step=3,kind=bad_alloc -> exit $rc after ${took} s: $(grep -m1 "out of memory" <<<"$out" | head -c 160)"
else
  echo "FAIL: std::bad_alloc in rank 1 under mpirun: exit $rc after ${took} s:"
  echo "$out" | tail -5
  failures=$((failures + 1))
fi
finish
