# The MPI backend from the command line: ours and MPI's native collectives under mpirun, a clear
# error outside mpirun, and a rank killed with SIGKILL mid-run ending the job within a bounded
# time with a message that names it (no hang).
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

expect_error "not started by mpirun" collectives --backend mpi --ranks 2 --size 4KiB
expect_error "--backend: unknown backend 'gloo'" collectives --backend gloo

for algo in ring tree native; do
  out=$("${MPIRUN[@]}" -np 3 "$DTRAIN" collectives --backend mpi --ranks 3 --size 1MiB --algo $algo \
    --trials 1 --trial-seconds 0.01 2>&1)
  if grep -q "result verified" <<<"$out" && grep -q "mpi backend" <<<"$out"; then
    echo "ok: mpirun -np 3 collectives --algo $algo verified"
  else
    echo "FAIL: mpirun -np 3 collectives --algo $algo:"; echo "$out" | tail -5
    failures=$((failures + 1))
  fi
done

# SIGKILL one rank in the middle of a long run: the job must end, naming the dead rank.
log=$(mktemp)
start=$(date +%s)
"${MPIRUN[@]}" -np 2 "$DTRAIN" collectives --backend mpi --ranks 2 --size 16MiB --trials 1000 \
  --trial-seconds 1 --timeout 20 >"$log" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 100); do
  victim=$(pgrep -f "dtrain collectives --backend mpi --ranks 2 --size 16MiB --trials 1000" |
    while read -r p; do
      [ "$(cat /proc/$p/comm 2>/dev/null)" = "dtrain" ] && grep -qz '^OMPI_COMM_WORLD_RANK=1$' /proc/$p/environ 2>/dev/null && echo "$p"
    done | head -1)
  [ -n "$victim" ] && break
  sleep 0.1
done
sleep 1
if [ -z "$victim" ]; then
  echo "FAIL: could not find rank 1's process"; failures=$((failures + 1)); kill $job 2>/dev/null
else
  kill -9 "$victim"
  # The watchdog's output goes nowhere and its sleep dies with it: a sleep left holding the
  # test's stdout would keep CTest waiting for the pipe to close, a minute after the test ended.
  ( exec >/dev/null 2>&1; sleep 60 & nap=$!; trap 'kill $nap; exit' TERM; wait $nap; kill -9 $job ) &
  watchdog=$!
  wait $job; rc=$?
  kill $watchdog 2>/dev/null
  elapsed=$(( $(date +%s) - start ))
  if [ $rc -ne 0 ] && [ $elapsed -lt 60 ] && grep -qiE "rank 1|process rank 1" "$log"; then
    echo "ok: SIGKILL of rank 1 ended the job in ${elapsed}s (exit $rc): $(grep -iE 'rank 1' "$log" | head -1)"
  else
    echo "FAIL: after SIGKILL of rank 1: exit $rc after ${elapsed}s; log:"; tail -20 "$log"
    failures=$((failures + 1))
  fi
fi
rm -f "$log"
finish
