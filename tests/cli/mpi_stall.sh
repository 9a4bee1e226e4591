#!/usr/bin/env bash
# A stalled rank under mpirun (SIGSTOP: alive, holding its connections, never answering) ends
# the job within a bound, with a message naming the timeout, and no rank dies of a signal of
# its own (OpenMPI used to crash in MPI_Cancel, exit 139). Also the launcher checks: mpirun -np
# 2 with the threads backend, and more or fewer processes than the layout's ranks, are refused.
# Usage: mpi_stall.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
log=$(mktemp)
job="" victim=""
# Nothing may outlive the test: a stopped rank keeps its memory and ports until killed.
cleanup() {
  if [ -n "$victim" ]; then
    kill -CONT "$victim" 2>/dev/null
    kill -KILL "$victim" 2>/dev/null
  fi
  [ -n "$job" ] && kill -KILL "$job" 2>/dev/null
  rm -f "$log"
}
trap cleanup EXIT

# The pid of the dtrain process below $1 (mpirun, possibly through timeout) holding world rank $2.
rank_pid() {
  local parent=$1 rank=$2 p
  for p in $(pgrep -P "$parent"); do
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dtrain ] &&
      grep -qz "^OMPI_COMM_WORLD_RANK=$rank\$" "/proc/$p/environ" 2>/dev/null; then
      echo "$p"
      return 0
    fi
    rank_pid "$p" "$rank" && return 0
  done
  return 1
}

# stall_case NAME PATTERN ARGS...: starts `mpirun -np 4 dtrain ARGS` (with --timeout 5), waits
# for PATTERN in its output (the job is running; "": for rank 1's process, then 2 s more), stops
# rank 1 and expects the job to end within 30 s with a non-zero exit that is not a crash, the
# timeout in the output, no segfault.
stall_case() {
  local name=$1 started=$2
  shift 2
  : >"$log"
  timeout -s KILL 60 "${MPIRUN[@]}" -np 4 "$DTRAIN" "$@" --timeout 5 >"$log" 2>&1 &
  job=$!
  victim=""
  for _ in $(seq 1 300); do
    { [ -z "$started" ] || grep -q -- "$started" "$log"; } && victim=$(rank_pid "$job" 1) && break
    sleep 0.1
  done
  if [ -z "$victim" ]; then
    echo "FAIL: $name: the job never started, or rank 1's process was not found:"
    tail -5 "$log"
    failures=$((failures + 1))
    kill -KILL "$job" 2>/dev/null
    wait "$job" 2>/dev/null
    job=""
    return
  fi
  if [ -n "$started" ]; then sleep 1; else sleep 2; fi
  kill -STOP "$victim"
  local start rc took
  start=$(date +%s)
  wait "$job"
  rc=$?
  took=$(($(date +%s) - start))
  job=""
  kill -CONT "$victim" 2>/dev/null
  kill -KILL "$victim" 2>/dev/null
  victim=""
  if [ $rc -eq 0 ] || [ $rc -eq 139 ] || [ $rc -eq 137 ] || [ $took -ge 30 ]; then
    echo "FAIL: $name: exit $rc after ${took} s (expected a non-zero exit, no crash, < 30 s):"
    tail -8 "$log"
    failures=$((failures + 1))
  elif grep -qE "Segmentation fault|SIGSEGV|Signal: Segmentation|exited on signal" "$log"; then
    echo "FAIL: $name: a rank crashed:"
    grep -m3 -E "Segmentation|SIGSEGV|exited on signal" "$log"
    failures=$((failures + 1))
  elif ! grep -qE "timed out after 5 s: rank [0-9]+: .*(from|to) rank [0-9]+[ ,]" "$log"; then
    # The first rank whose wait runs out aborts the job: often a neighbour of rank 1, but a
    # rank further along the ring (waiting on one that waits on rank 1) can win that race, so
    # the message names the peer it waited for, which is not always rank 1; a shared-memory
    # barrier names every member missing ("nothing came from rank 1, 3").
    echo "FAIL: $name: exit $rc, but no rank names the timeout and the peer it waited for:"
    tail -8 "$log"
    failures=$((failures + 1))
  else
    echo "ok: $name: rank 1 stopped, exit $rc after ${took} s: $(grep -m1 'timed out' "$log")"
  fi
}

stall_case "collectives" "" collectives --backend mpi --ranks 4 --size 16MiB \
  --trials 1000 --trial-seconds 0.5
stall_case "train --dp 2 --tp 2" "training tiny model" train --backend mpi --dp 2 --tp 2 \
  --model tiny --steps 100000 --eval-every 0 --eval-batches 1
stall_case "train --dp 4" "training tiny model" train --backend mpi --dp 4 --model tiny \
  --steps 100000 --eval-every 0 --eval-batches 1

# mpi_launch_case NAME NP PATTERN ARGS...: `mpirun -np NP dtrain ARGS` exits non-zero within
# 30 s, prints PATTERN exactly once (the first process), and starts no work.
mpi_launch_case() {
  local name=$1 np=$2 pattern=$3
  shift 3
  local out rc
  out=$(timeout -s KILL 30 "${MPIRUN[@]}" -np "$np" "$DTRAIN" "$@" 2>&1)
  rc=$?
  local count
  count=$(grep -cE -- "$pattern" <<<"$out")
  if [ $rc -ne 0 ] && [ $rc -ne 137 ] && [ "$count" = 1 ] && ! grep -q "training tiny" <<<"$out"; then
    echo "ok: $name -> exit $rc: $(grep -m1 -E -- "$pattern" <<<"$out")"
  else
    echo "FAIL: $name: exit $rc, '$pattern' printed $count times:"
    echo "$out" | head -8
    failures=$((failures + 1))
  fi
}
small=(--model tiny --steps 2 --eval-every 0 --eval-batches 1)
mpi_launch_case "mpirun -np 2 train (threads)" 2 "add --backend mpi" train "${small[@]}"
mpi_launch_case "mpirun -np 2 train --dp 2 (threads)" 2 \
  "started by mpirun with 2 processes but --backend threads" train "${small[@]}" --dp 2
mpi_launch_case "mpirun -np 2 collectives (threads)" 2 "add --backend mpi" collectives \
  --ranks 2 --size 1KiB --trials 1 --trial-seconds 0.01
mpi_launch_case "mpirun -np 2 bench collectives (threads)" 2 "add --backend mpi" bench \
  collectives --ranks 2 --max-size 4KiB --trials 1 --trial-seconds 0.01
mpi_launch_case "mpirun -np 2 bench dp" 2 "start it without mpirun" bench dp
mpi_launch_case "mpirun -np 4 train --backend mpi --dp 2" 4 \
  "needs 2 ranks but mpirun started 4 processes, 2 of which would sit idle" train "${small[@]}" \
  --backend mpi --dp 2
mpi_launch_case "mpirun -np 2 train --backend mpi --dp 4" 2 \
  "needs 4 ranks but mpirun started only 2 processes" train "${small[@]}" --backend mpi --dp 4

# One process under mpirun: the threads backend is what it always was.
out=$(timeout -s KILL 60 "${MPIRUN[@]}" -np 1 "$DTRAIN" train "${small[@]}" --dp 2 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "at end" <<<"$out"; then
  echo "ok: mpirun -np 1 train --dp 2 (threads) runs"
else
  echo "FAIL: mpirun -np 1 train --dp 2 (threads): exit $rc"
  echo "$out" | tail -5
  failures=$((failures + 1))
fi
finish
