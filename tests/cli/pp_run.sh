#!/usr/bin/env bash
# `dtrain train --pp P` succeeds for every schedule: the summary names the layout, prints the
# per-stage table and the measured bubble beside the predicted one; the JSON carries the same;
# --trace writes a well-formed Chrome trace (a compute and a communication track per rank) and
# --timeline an SVG; the losses equal the serial run's. Usage: pp_run.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run=(train --model tiny --layers 4 --steps 3 --eval-every 0 --eval-batches 1)
expect_output 'DP\(1\)-TP\(1\)-PP\(2\)-rank\(0\) 1f1b, 4 micro-batches of 2' "${run[@]}" \
  --pp 2 --microbatches 4
expect_output 'pipeline: gpipe on 4 stages, 8 micro-batches of 1' "${run[@]}" \
  --pp 4 --microbatches 8 --schedule gpipe
expect_output 'bubble, measured: .* %' "${run[@]}" --pp 2 --microbatches 2 --schedule zb-h1
expect_output 'bubble, predicted: .* plan::pipeline_bubble' "${run[@]}" \
  --pp 2 --microbatches 4 --schedule interleaved
expect_output '2 model chunks per stage' "${run[@]}" --pp 2 --microbatches 4 --schedule interleaved
expect_output '"simulated_bubble"' "${run[@]}" --pp 2 --microbatches 2 --json
expect_output '0      0-2' "${run[@]}" --pp 2 --stage-layers 3,1

# --trace and --timeline: files exist and are well formed.
expect_output "wrote $tmp/t.json" "${run[@]}" --pp 4 --microbatches 4 --trace "$tmp/t.json" \
  --timeline "$tmp/t.svg"
# (python3 parses the JSON; tests/e2e/pipeline_training_test.cc checks the trace in C++ too.)
if ! command -v python3 >/dev/null; then
  echo "skip: no python3 to parse the trace and compare the losses"
elif ! python3 - "$tmp/t.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
tids = {e["tid"] for e in spans}
assert tids == set(range(8)), f"expected tracks 0..7 (compute and communication of 4 ranks), got {tids}"
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
assert {e["cat"] for e in spans} >= {"forward", "backward", "send", "recv", "other"}
PY
then
  echo "FAIL: $tmp/t.json is not the expected Chrome trace"
  failures=$((failures + 1))
fi
if ! head -c 200 "$tmp/t.svg" | grep -q '<svg' || ! grep -q 'rank 3' "$tmp/t.svg"; then
  echo "FAIL: $tmp/t.svg is not an SVG timeline of 4 ranks"
  failures=$((failures + 1))
fi

# The pipeline trains the same model as the serial run: the same losses, up to float rounding
# (tests/e2e/pipeline_equality_test.cc states the tolerance; 1e-5 here).
"$DTRAIN" "${run[@]}" --json >"$tmp/serial.json" 2>/dev/null
"$DTRAIN" "${run[@]}" --pp 2 --microbatches 4 --json >"$tmp/pp.json" 2>/dev/null
if command -v python3 >/dev/null && ! python3 - "$tmp/serial.json" "$tmp/pp.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["train_losses"] for f in sys.argv[1:3])
assert len(a) == len(b) == 3 and all(abs(x - y) <= 1e-5 for x, y in zip(a, b)), (a, b)
PY
then
  echo "FAIL: pipeline losses differ from the serial run's"
  failures=$((failures + 1))
fi
finish
