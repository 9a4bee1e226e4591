#!/usr/bin/env bash
# Stops that must lose nothing (threads backend): a full disk under --metrics / --trace warns
# once and the run finishes with its checkpoint; a run killed (kill -9) before its first
# checkpoint leaves a --save folder that the same command takes over (the stale lock said so)
# and that --resume refuses for want of a checkpoint; SIGUSR1 stops and saves like SIGTERM; a
# signal during start-up (a --data FIFO without a writer) ends the process within seconds; a
# deep model (8,000 and 100,000 layers) is sized in well under a second.
# Usage: train_stops.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
quick=(train --model tiny --steps 3 --eval-every 0 --eval-batches 1)

# A full disk: /dev/full accepts the open and fails every write.
if [[ -w /dev/full ]]; then
  "$DTRAIN" "${quick[@]}" --metrics /dev/full --trace /dev/full --save "$tmp/full" \
    >"$tmp/full.out" 2>"$tmp/full.err"
  rc=$?
  warnings=$(grep -c "warning: --metrics /dev/full: cannot be written" "$tmp/full.err")
  if [[ $rc -eq 0 && $warnings -eq 1 && -f "$tmp/full/step-00000003/manifest.json" ]] &&
    grep -q "warning: --trace /dev/full: not written" "$tmp/full.err"; then
    echo "ok: --metrics/--trace /dev/full -> exit 0, one warning each, checkpoint step 3 written"
  else
    fail "--metrics /dev/full: exit $rc, $warnings metrics warning(s): $(head -3 "$tmp/full.err")"
  fi
fi

# kill -9 before the first checkpoint: the run holds the lock and has written run.json.
long=(train --model tiny --steps 100000 --eval-every 0 --eval-batches 1 --log-every 1)
"$DTRAIN" "${long[@]}" --save "$tmp/killed" >/dev/null 2>"$tmp/killed.err" &
pid=$!
for _ in $(seq 600); do
  grep -q "^step 2/" "$tmp/killed.err" 2>/dev/null && break
  sleep 0.1
done
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=
[[ -f "$tmp/killed/run.json" && -s "$tmp/killed/.lock" ]] ||
  fail "the killed run left no run.json or no holder in .lock (the test proves nothing)"
expect_error "--resume $tmp/killed.*(no checkpoint|no .?latest)" "${quick[@]}" --resume "$tmp/killed"
err=$("$DTRAIN" "${quick[@]}" --save "$tmp/killed" 2>&1 >/dev/null)
rc=$?
if [[ $rc -eq 0 && "$err" == *"is stale"* && -f "$tmp/killed/step-00000003/manifest.json" ]]; then
  echo "ok: the same command after kill -9 -> exit 0: $(grep stale <<<"$err")"
else
  fail "after kill -9 the same command gave exit $rc: $(head -2 <<<"$err")"
fi

# SIGUSR1 (a scheduler's warning) stops after the step, saves, and exits 128 + 10.
"$DTRAIN" "${long[@]}" --save "$tmp/usr1" >"$tmp/usr1.out" 2>"$tmp/usr1.err" &
pid=$!
for _ in $(seq 600); do
  grep -q "^step 3/" "$tmp/usr1.err" 2>/dev/null && break
  sleep 0.1
done
kill -USR1 "$pid"
wait "$pid"
rc=$?
pid=
step=$(grep -o "stopped by SIGUSR1 after step [0-9]*" "$tmp/usr1.out" | grep -o '[0-9]*$')
if [[ $rc -eq 138 && -n "$step" && "$(cat "$tmp/usr1/latest" 2>/dev/null)" == $(printf 'step-%08d' "$step") ]]; then
  echo "ok: SIGUSR1 -> exit 138, stopped after step $step, its checkpoint written"
else
  fail "SIGUSR1 gave exit $rc, step '$step': $(tail -2 "$tmp/usr1.err")"
fi

# SIGTERM while --data blocks on a FIFO with no writer: the start-up ends within 2 s.
# ThreadSanitizer runs a signal's handler only when the thread leaves an intercepted call, and
# it does not count open() among the blocking ones: under TSan the handler waits for a writer.
if ldd "$DTRAIN" 2>/dev/null | grep -q libtsan; then
  echo "skipped: SIGTERM on a blocked FIFO (ThreadSanitizer defers signal handlers past open())"
else
  mkfifo "$tmp/fifo"
  "$DTRAIN" "${quick[@]}" --data "$tmp/fifo" >/dev/null 2>"$tmp/fifo.err" &
  pid=$!
  sleep 0.5
  kill -TERM "$pid"
  for _ in $(seq 20); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    fail "SIGTERM during a blocked --data FIFO did not end the process within 2 s"
  else
    wait "$pid"
    rc=$?
    if [[ $rc -eq 143 ]] && grep -q "stopped by SIGTERM during start-up" "$tmp/fifo.err"; then
      echo "ok: SIGTERM while --data waits on a FIFO -> exit 143: $(grep -m1 stopped "$tmp/fifo.err")"
    else
      fail "SIGTERM on a blocked FIFO gave exit $rc: $(cat "$tmp/fifo.err")"
    fi
  fi
  pid=
fi

# The start-up memory check is arithmetic (it was quadratic, 33 s at 8,000 layers, then built
# parameter tables of 1.2 million tensors, 4.8 s at 100,000): 8,000 and 100,000 layers are each
# sized in a fraction of a second (the bound leaves room for a loaded machine).
for layers in 8000 100000; do
  start=$(date +%s%N)
  err=$("$DTRAIN" train --model tiny --steps 1 --layers $layers --max-rank-memory 1MiB 2>&1 >/dev/null)
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  if [[ $rc -ne 0 && "$err" == *"--max-rank-memory"* && "$err" == *"GiB by the plan/"* &&
    $ms -lt 1500 ]]; then
    echo "ok: --layers $layers refused in $ms ms: $(head -c 120 <<<"$err")"
  else
    fail "--layers $layers: exit $rc after $ms ms: $(head -c 200 <<<"$err")"
  fi
done
finish
