#!/usr/bin/env bash
# `dtrain train --cluster FILE` with measured rates (`dtrain calibrate --compute`) sets each
# phase's predicted time beside its measurement, in the table and in --json's "clock" object
# (keys the benchmark reads); without measured rates the report says how to get them and the
# JSON has "clock": null. Usage: train_clock.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=(train --model tiny --layers 2 --steps 3 --eval-every 0 --eval-batches 1)

expect_output 'Clock: no measured rates: run `dtrain calibrate --compute -o cpu.json`' "${run[@]}"
out=$("$DTRAIN" "${run[@]}" --json 2>/dev/null)
if python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["clock"] is None else 1)' <<<"$out"; then
  echo 'ok: --json without measured rates: "clock": null'
else
  fail '--json without measured rates: "clock" is not null'
fi

# Two emulated nodes of two ranks (calibrate refuses one node: no inter-node link to measure);
# short link measurements, the full compute grid (one pass: the figures' steadiness is not what
# this checks).
# 1 MiB exchanges: calibrate refuses to write a file whose links read below plan's floor, and
# small exchanges among busy-polling thread ranks do on a loaded machine.
links=(--ranks 4 --ranks-per-node 2 --seconds 0.01 --trials 1 --iterations 5 --size 1MiB)
if ! "$DTRAIN" calibrate "${links[@]}" --compute --passes 1 -o "$tmp/cpu.json" >"$tmp/calibrate.log" 2>&1; then
  fail "dtrain calibrate --compute -o cpu.json: $(tail -3 "$tmp/calibrate.log")"
  finish
fi
for layout in "--dp 2" "--tp 2" "--pp 2 --microbatches 2" "--cp 2" "--cp 2 --cp-algo ulysses" \
  "--dp 2 --experts 4 --top-k 2 --ep 2"; do
  # shellcheck disable=SC2086
  expect_output 'Clock: predicted from .*cpu.json.* beside measured on rank' \
    "${run[@]}" $layout --cluster "$tmp/cpu.json"
  # shellcheck disable=SC2086
  out=$("$DTRAIN" "${run[@]}" $layout --cluster "$tmp/cpu.json" --json 2>/dev/null)
  if python3 - "$out" "$layout" <<'PY'; then
import json, sys
c = json.loads(sys.argv[1])["clock"]
# MoE: the same clock priced on the run's own routing, beside the a-priori (uniform) one.
assert ("given_routing" in c) == ("--experts" in sys.argv[2]), sorted(c)
keys = {"forward_s", "backward_s", "tp_comm_s", "pipeline_wait_s", "exposed_dp_s", "optimizer_s",
        "step_s"}
assert c["rates"].endswith("cpu.json"), c["rates"]
for side in ("predicted", "measured") + (("given_routing",) if "given_routing" in c else ()):
    assert set(c[side]) == keys, (side, sorted(c[side]))
    assert all(v >= 0 for v in c[side].values()), c[side]
    assert c[side]["step_s"] > 0 and c[side]["forward_s"] > 0 and c[side]["backward_s"] > 0
p = c["predicted"]
assert abs(sum(v for k, v in p.items() if k != "step_s") - p["step_s"]) <= 1e-9 * p["step_s"]
PY
    echo "ok: --json $layout: clock.predicted and clock.measured carry every phase"
  else
    fail "--json $layout: clock object incomplete: $(python3 -c 'import json,sys; print(json.load(sys.stdin).get("clock"))' <<<"$out")"
  fi
done
# MoE layouts the clock does not price (expert TP; EP at ZeRO 1 or with full recompute) train and
# report rc 0 with the measured phases and the reason there is no prediction (the one `plan`
# refuses them with), said at the start on stderr too; the JSON's "predicted" is null.
for layout in "--tp 2 --experts 4 --top-k 2" "--dp 2 --experts 4 --top-k 2 --ep 2 --zero 1" \
  "--dp 2 --experts 4 --top-k 2 --ep 2 --recompute full"; do
  flag="--ep 2"
  [[ $layout == --tp* ]] && flag="--tp 2"
  # shellcheck disable=SC2086
  expect_output "^Clock: no prediction from .*cpu.json for this layout: $flag.*the engine clock" \
    "${run[@]}" $layout --cluster "$tmp/cpu.json"
  # shellcheck disable=SC2086
  out=$("$DTRAIN" "${run[@]}" $layout --cluster "$tmp/cpu.json" --json 2>"$tmp/err")
  if [ $? -eq 0 ] && grep -q "^warning: --cluster .*: the clock table will carry no prediction" "$tmp/err" &&
    python3 -c 'import json,sys; c=json.load(sys.stdin)["clock"]; sys.exit(0 if c["predicted"] is None and c["not_priced"] and c["measured"]["step_s"] > 0 and "given_routing" not in c else 1)' <<<"$out"; then
    echo "ok: $layout --json: clock.predicted null, clock.not_priced says why, warned at the start"
  else
    fail "$layout --json: $(python3 -c 'import json,sys; print(json.load(sys.stdin).get("clock"))' <<<"$out" 2>&1 | head -c 300); $(head -3 "$tmp/err")"
  fi
done
# The table sets the routing-given column beside the a-priori one for MoE only.
expect_output 'phase +predicted ms +measured ms +error +given routing ms +error' \
  "${run[@]}" --dp 2 --experts 4 --top-k 2 --ep 2 --cluster "$tmp/cpu.json"
expect_output 'given routing: the same clock on the experts.* rows this run routed per block' \
  "${run[@]}" --dp 2 --experts 4 --top-k 2 --cluster "$tmp/cpu.json"
# A phase with no time on either side (no TP collectives under --dp 2) carries "-", not -100%.
expect_output '  TP collectives +0\.000 +0\.000 +-$' "${run[@]}" --dp 2 --cluster "$tmp/cpu.json"
# The TP phase is priced and measured only where there are TP collectives.
out=$("$DTRAIN" "${run[@]}" --tp 2 --cluster "$tmp/cpu.json" --json 2>/dev/null)
if python3 -c 'import json,sys; c=json.load(sys.stdin)["clock"]; sys.exit(0 if c["predicted"]["tp_comm_s"] > 0 and c["measured"]["tp_comm_s"] > 0 else 1)' <<<"$out"; then
  echo "ok: --tp 2: TP collectives predicted and measured"
else
  fail "--tp 2: TP collectives missing from the clock"
fi
# `plan` on the same file prices CP and MoE layouts with the engine clock (no refusal), and
# refuses what the engine clock does not price yet, naming the flags.
shape=(--layers 2 --hidden 64 --heads 4 --vocab 512 --seq-length 64 --global-batch 8)
expect_output 'CP communication .*exposed' plan "${shape[@]}" --cluster "$tmp/cpu.json" --dp 2 --cp 2 --cp-algo ring
expect_output 'clock: engine \(measured rates\)' plan "${shape[@]}" --cluster "$tmp/cpu.json" --dp 4 --experts 4 --top-k 2 --ep 2
expect_error '--tp 2 with --experts: the engine clock .* does not price the MoE layer under TP' \
  plan "${shape[@]}" --cluster "$tmp/cpu.json" --dp 2 --tp 2 --experts 4 --top-k 2
# --search on the file skips the MoE layouts the clock does not price (no TP, EP at ZeRO 0 only).
expect_output 'search .* layouts from .* splits' plan "${shape[@]}" --cluster "$tmp/cpu.json" --experts 4 --top-k 2 --search
expect_error '--ep 2: the engine clock .* prices EP at --zero 0' \
  plan "${shape[@]}" --cluster "$tmp/cpu.json" --dp 4 --experts 4 --top-k 2 --ep 2 --zero 1
finish
