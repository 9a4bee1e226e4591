#!/usr/bin/env bash
# `dtrain train` on any layout prints one report (and one JSON schema, "layout", version 1):
# the layout line, per rank its blocks, model states and activations beside the plan, its bytes
# per step beside the plan on every axis, a pipeline's bubble, the DP overlap, the node
# topology's split and its TP warning; --trace writes a Chrome trace with four tracks per rank
# and --timeline an SVG for any layout; every layout's losses equal the single-rank run's; and
# the layout flags' bad input is refused naming the flag. Usage: layout_run.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=(train --model tiny --layers 4 --steps 3 --eval-every 0 --eval-batches 1)

expect_output 'layout: DP\(1\) x TP\(1\) x PP\(1\) = 1 rank on the threads backend' "${run[@]}"
expect_output 'DP\(4\)-TP\(1\)-PP\(1\)-rank\(0\) ZeRO-3' "${run[@]}" --dp 4 --zero 3
expect_output 'layout: DP\(2\) x TP\(2\) x PP\(2\) = 8 ranks .* ZeRO-3, sequence parallel, recompute full, 1f1b' \
  "${run[@]}" --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 3 --sequence-parallel --recompute full
# Mixed precision at ZeRO-3 with one block per pipeline stage: each rank's gathered working set
# equals the plan, or differs by a gradient the line names; nothing is left unexplained.
zero3_bf16=(train --model tiny --layers 2 --steps 3 --eval-every 0 --eval-batches 1 --dp 2 --pp 2 --microbatches 2 --zero 3 --precision bf16)
out=$("$DTRAIN" "${zero3_bf16[@]}" 2>/dev/null)
rc=$?
working_set=$(grep -E '^    rank [0-9]+: ' <<<"$out")
if [ $rc -ne 0 ] || [ "$(grep -cE '(= plan|not in the plan\))$' <<<"$working_set")" -ne 4 ] ||
  grep -q unexplained <<<"$out"; then
  echo "FAIL: dtrain ${zero3_bf16[*]} (exit $rc): a ZeRO-3 working set differs from the plan unnamed:"
  echo "$working_set"
  failures=$((failures + 1))
else
  echo "ok: dtrain ${zero3_bf16[*]}: every rank's ZeRO-3 working set = plan or a named gradient"
fi
expect_output 'DP\(1\)-TP\(1\)-PP\(2\)-rank\(0\) 1f1b, 4 micro-batches of 2' "${run[@]}" \
  --pp 2 --microbatches 4
expect_output 'pipeline bubble: .*% of the last step' "${run[@]}" --pp 2 --microbatches 2 --schedule zb-h1
expect_output 'interleaved v = 2' "${run[@]}" --pp 2 --microbatches 4 --schedule interleaved
expect_output '0  dp0 tp0 pp0     0  0-2 ' "${run[@]}" --pp 2 --stage-layers 3,1
expect_output 'DP communication hidden behind compute' "${run[@]}" --dp 2 --grad-accum 2 --bucket-size 16KiB
expect_output 'each equals plan::model_state_bytes; one micro-batch.s activations equal the plan/ formulas' \
  "${run[@]}" --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 2 --sequence-parallel
expect_output 'every TP, DP and PP group stays inside one node' "${run[@]}" --dp 2 --tp 2 --ranks-per-node 4
# The warning itself is on stderr at the start (tests/cli/report_consistency.sh); the JSON keeps it.
expect_output '"TP group \{0,2\} spans nodes \{0,1\}' \
  "${run[@]}" --dp 2 --tp 2 --ranks-per-node 2 --rank-order dp-tp-pp --json
expect_output '"version": 1' "${run[@]}" --tp 2 --json
expect_output '"inter_node"' "${run[@]}" --dp 2 --tp 2 --ranks-per-node 2 --json
expect_output '"simulated"' "${run[@]}" --pp 2 --microbatches 2 --json
expect_output '"tp_regather"' "${run[@]}" --tp 2 --sequence-parallel --json

# No figure may be marked as differing from the plan on a layout whose counters are exact.
out=$("$DTRAIN" "${run[@]}" --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 1 2>/dev/null)
if grep -qE '\(plan [0-9]' <<<"$out"; then
  echo "FAIL: a measured figure differs from its plan/ formula:"
  grep -E '\(plan [0-9]' <<<"$out" | head -5
  failures=$((failures + 1))
else
  echo "ok: every figure of the 8-rank ZeRO-1 layout equals its plan/ formula"
fi

# --trace and --timeline, for a pipeline and for a composed layout.
expect_output "trace of the last step: $tmp/t.json" "${run[@]}" --pp 4 --microbatches 4 \
  --trace "$tmp/t.json" --timeline "$tmp/t.svg"
expect_output "trace of the last step: $tmp/c.json" "${run[@]}" --dp 2 --tp 2 --zero 3 \
  --trace "$tmp/c.json"
if ! command -v python3 >/dev/null; then
  echo "skip: no python3 to parse the traces and compare the losses"
elif ! python3 - "$tmp/t.json" "$tmp/c.json" <<'PY'
import json, sys
for path, ranks, kinds in ((sys.argv[1], 4, {"forward", "backward", "send", "recv", "other"}),
                           (sys.argv[2], 4, {"forward", "backward", "collective", "async_collective"})):
    spans = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
    tids = {e["tid"] for e in spans}
    assert tids <= set(range(4 * ranks)) and all(4 * r in tids for r in range(ranks)), (path, tids)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans), path
    assert {e["cat"] for e in spans} >= kinds, (path, {e["cat"] for e in spans})
PY
then
  echo "FAIL: a trace is not the expected Chrome trace"
  failures=$((failures + 1))
else
  echo "ok: both traces parse, with each rank's tracks and the expected kinds of span"
fi
if ! head -c 200 "$tmp/t.svg" | grep -q '<svg' || ! grep -q 'rank 3' "$tmp/t.svg"; then
  echo "FAIL: $tmp/t.svg is not an SVG timeline of 4 ranks"
  failures=$((failures + 1))
fi

# Every layout trains the same model as the single rank: the same losses up to float rounding
# (tests/e2e/layout_equality_test.cc states the tolerance; 1e-5 here).
"$DTRAIN" "${run[@]}" --json >"$tmp/serial.json" 2>/dev/null
i=0
for layout in "--pp 2 --microbatches 4" "--dp 2 --zero 3" "--tp 2 --sequence-parallel" \
  "--dp 2 --tp 2 --pp 2 --microbatches 2 --zero 3 --sequence-parallel --recompute full"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  "$DTRAIN" "${run[@]}" $layout --json >"$tmp/l$i.json" 2>/dev/null
  if command -v python3 >/dev/null && ! python3 - "$tmp/serial.json" "$tmp/l$i.json" <<'PY'
import json, sys
a, b = ([s["loss"] for s in json.load(open(f))["train_losses"]] for f in sys.argv[1:3])
assert len(a) == len(b) == 3 and all(abs(x - y) <= 1e-5 for x, y in zip(a, b)), (a, b)
PY
  then
    echo "FAIL: $layout: losses differ from the single-rank run's"
    failures=$((failures + 1))
  else
    echo "ok: $layout: the single-rank run's losses"
  fi
done

# The layout flags' bad input: one check for every layout.
expect_error 'the mesh|--ranks-per-node 3 does not divide the 8 ranks' "${run[@]}" --dp 2 --tp 2 --pp 2 --ranks-per-node 3
expect_error '--rank-order "tp-tp-pp"' "${run[@]}" --dp 2 --tp 2 --rank-order tp-tp-pp
expect_error '--global-batch 8 does not split into --dp 4 x 4' "${run[@]}" --dp 4 --pp 2 --microbatches 4
expect_error '--backend "gloo" is not one of threads, mpi' "${run[@]}" --dp 2 --backend gloo
expect_error '--ranks-per-node 3 does not divide the 4 ranks' "${run[@]}" --dp 4 --ranks-per-node 3
expect_error '--dp-all-reduce hierarchical needs --zero 0' \
  "${run[@]}" --dp 4 --ranks-per-node 2 --zero 1 --dp-all-reduce hierarchical
expect_error '--dp-all-reduce hierarchical needs --ranks-per-node' \
  "${run[@]}" --dp 2 --tp 2 --dp-all-reduce hierarchical
expect_error '--bucket-size must be positive' "${run[@]}" --dp 2 --tp 2 --bucket-size 0
expect_error '--grad-accum 2 and --microbatches 2 both split the batch' \
  "${run[@]}" --pp 2 --microbatches 2 --grad-accum 2
expect_error '--max-rank-memory 64.0 KiB|--max-rank-memory .* needs' "${run[@]}" --max-rank-memory 64KiB
finish
