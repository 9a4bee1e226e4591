#!/usr/bin/env bash
# Ctrl-C (SIGINT) and SIGTERM during `dtrain train`: the run stops after the step in progress,
# writes a final checkpoint under --save, prints its summary and exits 130 / 143; a second
# Ctrl-C exits at once. The checkpoint then resumes like any other.
# Usage: train_signals.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
long=(train --model tiny --steps 100000 --eval-every 0 --eval-batches 1 --log-every 1)

# start NAME ARGS...: runs dtrain in the background and waits until it has done 3 steps.
start() {
  local name=$1
  shift
  "$DTRAIN" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  for _ in $(seq 600); do
    grep -q "^step 3/" "$tmp/$name.err" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "FAIL: $name never reached step 3 (60 s)"
  failures=$((failures + 1))
}

# expect_stop NAME SIGNAL RC: sends SIGNAL, then the run must end within 10 s with RC, the
# summary on stdout and (with --save) the checkpoint of the step it stopped after.
expect_stop() {
  local name=$1 signal=$2 want=$3 rc
  kill "-$signal" "$pid"
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  wait "$pid"
  rc=$?
  pid=
  local step
  step=$(grep -o "stopped by SIG$signal after step [0-9]*" "$tmp/$name.out" | grep -o '[0-9]*$')
  if [[ -z "$step" ]] && grep -q "\"stopped_by\": \"SIG$signal\"" "$tmp/$name.out"; then
    step=$(grep -o '"last_step": [0-9]*' "$tmp/$name.out" | grep -o '[0-9]*$')  # --json
  fi
  if [[ $rc -ne $want || -z "$step" ]]; then
    echo "FAIL: $name: SIG$signal gave exit $rc (want $want), summary: '$(head -3 "$tmp/$name.out")'"
    failures=$((failures + 1))
    return
  fi
  echo "ok: $name: SIG$signal -> exit $rc, stopped after step $step"
  if [[ -n "${4:-}" ]]; then
    local dir
    dir=$(printf '%s/step-%08d' "$4" "$step")
    if [[ -f "$dir/manifest.json" && "$(cat "$4/latest")" == "$(basename "$dir")" ]]; then
      echo "ok: $name: final checkpoint $dir"
    else
      echo "FAIL: $name: no final checkpoint $dir"
      failures=$((failures + 1))
    fi
  fi
}

start int "${long[@]}" --save "$tmp/ckpt"
expect_stop int INT 130 "$tmp/ckpt"
start term "${long[@]}" --dp 2 --json
expect_stop term TERM 143
grep -q '"stopped_by": "SIGTERM"' "$tmp/term.out" || {
  echo "FAIL: the JSON summary does not say stopped_by SIGTERM"
  failures=$((failures + 1))
}

# The interrupted run's checkpoint resumes into its own directory (a shorter schedule is a
# setting change, said so explicitly).
last=$(sed 's/step-0*//' "$tmp/ckpt/latest")
expect_output "resumed at step $last" train --model tiny --eval-every 0 --eval-batches 1 \
  --steps $((last + 2)) --resume "$tmp/ckpt" --save "$tmp/ckpt" --allow-resume-changes

# Two Ctrl-C: the second ends the process at once.
start twice train --model bench --steps 100000 --eval-every 0 --eval-batches 1 --log-every 1
kill -INT "$pid"
sleep 0.2  # two signals sent at once may be delivered as one
kill -INT "$pid"
for _ in $(seq 30); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "FAIL: a second SIGINT did not end the run within 3 s"
  failures=$((failures + 1))
else
  wait "$pid"
  rc=$?
  pid=
  if [[ $rc -eq 130 ]]; then echo "ok: second SIGINT -> exit 130"; else
    echo "FAIL: second SIGINT gave exit $rc"
    failures=$((failures + 1))
  fi
fi
finish
