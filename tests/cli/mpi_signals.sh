#!/usr/bin/env bash
# A scheduler's stop under mpirun loses nothing: SIGTERM and SIGINT sent to mpirun, or to every
# rank, stop all ranks after the same step; rank 0 writes the final checkpoint and prints the
# summary, the job exits non-zero, and no rank dies by a signal. The checkpoint then resumes bit
# for bit: two more steps from it give the same shards as an uninterrupted run (a constant
# learning rate, so the interrupted run's long schedule and the short ones agree step by step).
# mpirun (OpenMPI 4) does not forward SIGTERM/SIGINT: it sends the ranks SIGCONT, then SIGTERM
# after odls_base_sigkill_timeout seconds, then SIGKILL after as many again; the test gives the
# ranks 3 s, as docs/checkpoints.md advises for real runs (more there).
# Usage: mpi_signals.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 3 -np 2)
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
train=(train --model tiny --eval-every 0 --eval-batches 1 --dp 2 --backend mpi --lr 0.001
  --min-lr 0.001 --warmup 0)

# stop_case TARGET SIGNAL: TARGET is mpirun or ranks.
stop_case() {
  local target=$1 signal=$2 name="$1-$2"
  timeout -s KILL 90 "${MPIRUN[@]}" "$DTRAIN" "${train[@]}" --steps 100000 --log-every 1 \
    --save "$work/$name" >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  for _ in $(seq 600); do
    grep -q "^step 3/" "$work/$name.err" 2>/dev/null && break
    sleep 0.1
  done
  local mpirun_pid ranks
  mpirun_pid=$(pgrep -P "$pid" mpirun)
  ranks=$(pgrep -P "$mpirun_pid" -d ' ')
  if [[ $target == mpirun ]]; then
    kill "-$signal" "$mpirun_pid"
  else
    # shellcheck disable=SC2086
    kill "-$signal" $ranks
  fi
  wait "$pid"
  local rc=$?
  pid=
  local step
  step=$(grep -o "stopped by SIG[A-Z]* after step [0-9]*" "$work/$name.out" | grep -o '[0-9]*$')
  if [[ $rc -eq 0 || $rc -eq 137 || -z "$step" ]] ||
    grep -qiE "on signal|signal [0-9]+ \(|killed" "$work/$name.err"; then
    fail "SIG$signal to $target ($ranks): exit $rc, summary '$(grep stopped "$work/$name.out")': $(tail -4 "$work/$name.err")"
    return
  fi
  local last
  last=$(printf 'step-%08d' "$step")
  if [[ "$(cat "$work/$name/latest" 2>/dev/null)" != "$last" ]]; then
    fail "SIG$signal to $target: no final checkpoint $last"
    return
  fi
  echo "ok: SIG$signal to $target -> exit $rc, $(grep -o 'stopped by .*' "$work/$name.out"), checkpoint $last, no rank killed"
  # Two more steps from the checkpoint against an uninterrupted run of as many steps.
  local end=$((step + 2))
  timeout -s KILL 60 "${MPIRUN[@]}" "$DTRAIN" "${train[@]}" --steps $end --resume "$work/$name" \
    --save "$work/$name-resumed" --allow-resume-changes >/dev/null 2>&1 || fail "$name: resume failed"
  timeout -s KILL 60 "${MPIRUN[@]}" "$DTRAIN" "${train[@]}" --steps $end \
    --save "$work/$name-straight" >/dev/null 2>&1 || fail "$name: the uninterrupted run failed"
  local want got shard same=1
  want=$(printf '%s/step-%08d' "$work/$name-straight" $end)
  got=$(printf '%s/step-%08d' "$work/$name-resumed" $end)
  for shard in "$want"/rank-*.bin; do
    cmp -s "$shard" "$got/$(basename "$shard")" || same=0
  done
  if [[ $same -eq 1 && -f "$want/rank-00000.bin" ]]; then
    echo "ok: $name: resumed from step $step, step $end equals the uninterrupted run's bit for bit"
  else
    fail "$name: the resumed run's step-$end shards differ from the uninterrupted run's"
  fi
}

stop_case mpirun TERM
stop_case mpirun INT
stop_case ranks TERM
stop_case ranks INT
finish
