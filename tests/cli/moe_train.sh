#!/usr/bin/env bash
# `dtrain train --experts`: a tiny MoE model (L2 C32 NH4 T16 B2, E=4, k=2) trains serially and
# its loss falls; the routing report's figures are consistent (per step, tokens per expert sum
# to tokens * k * MoE blocks - dropped; dropless drops nothing, a capacity factor drops some);
# with the load-balancing loss on vs off the per-expert spread is printed for both; expert TP
# (+SP, +EP, and with --recompute full: every rank's TP and EP bytes equal to plan/'s), bf16
# (+EP) and zb-h1 runs report the same routing figures; bad MoE flags are refused naming the
# flag.
# Usage: moe_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=(train --layers 2 --hidden 32 --heads 4 --context 16 --global-batch 2 --eval-every 0)
moe=("${shape[@]}" --experts 4 --top-k 2)

# check_report FILE STEPS CAPACITY: the JSON's routing is consistent; prints the spread.
check_report() {
  python3 - "$@" <<'PY'
import json, sys
path, steps, capacity = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
j = json.load(open(path))
m = j["moe"]
assert m["experts"] == 4 and m["top_k"] == 2, m
rows = m["steps"]
assert len(rows) == steps, len(rows)
tokens = j["run"]["tokens_per_step"]
blocks = 2  # --moe-every 1 on 2 layers
for r in rows:
    assert len(r["expert_tokens"]) == 4, r
    assert r["assignments"] == tokens * 2 * blocks, r
    assert sum(r["expert_tokens"]) == r["assignments"] - r["dropped"], r
    if capacity == 0:
        assert r["dropped"] == 0, r
    else:  # ceil(c * tokens * k / E) per expert, per block and micro-batch
        cap = -(-int(capacity * tokens * 2 * 1000) // (4 * 1000))
        assert max(r["expert_tokens"]) <= cap * blocks, (r, cap)
    assert r["aux_loss"] > 0, r
losses = [s["loss"] for s in j["train_losses"]]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
spread = [r["spread"] for r in rows]
print(f"loss {first:.4f} -> {last:.4f}; aux {rows[0]['aux_loss']:.4f} -> {rows[-1]['aux_loss']:.4f}; "
      f"spread mean {sum(spread)/len(spread):.3f} (first 10 {sum(spread[:10])/10:.3f}, "
      f"last 10 {sum(spread[-10:])/10:.3f}); dropped {sum(r['dropped'] for r in rows)}; "
      f"last step tokens per expert {rows[-1]['expert_tokens']}")
assert last < first - 0.3, f"MoE loss did not fall: {first} -> {last}"
PY
}

"$DTRAIN" "${moe[@]}" --steps 40 --json > "$tmp/on.json" 2> /dev/null || fail "MoE run exited $?"
echo -n "aux-loss-coef 0.01 (dropless): " && check_report "$tmp/on.json" 40 0 || fail "report (aux on)"
"$DTRAIN" "${moe[@]}" --steps 40 --aux-loss-coef 0 --json > "$tmp/off.json" 2> /dev/null ||
  fail "MoE run without aux exited $?"
echo -n "aux-loss-coef 0 (dropless):    " && check_report "$tmp/off.json" 40 0 || fail "report (aux off)"
"$DTRAIN" "${moe[@]}" --steps 40 --capacity-factor 1.0 --json > "$tmp/cap.json" 2> /dev/null ||
  fail "MoE run with capacity exited $?"
echo -n "capacity factor 1.0:           " && check_report "$tmp/cap.json" 40 1.0 || fail "report (capacity)"
python3 -c "
import json,sys; r=json.load(open('$tmp/cap.json'))['moe']['steps']
sys.exit(0 if sum(x['dropped'] for x in r) > 0 else 1)" || fail "capacity factor 1.0 dropped nothing"

# The table carries the same routing section, and the progress lines the aux loss.
"$DTRAIN" "${moe[@]}" --steps 3 > "$tmp/table.txt" 2> "$tmp/progress.txt" || fail "table run"
grep -q "^Routing (E=4 k=2 every 1 block(s), dropless, aux-loss-coef 0.01)" "$tmp/table.txt" ||
  fail "table lacks the routing section"
grep -q " aux [0-9]" "$tmp/progress.txt" || fail "progress lacks the aux loss"

expect_error "--top-k must be in \[1, --experts 4\] \(got 5\)" "${shape[@]}" --experts 4 --top-k 5 --steps 1
expect_error "--moe-every must be in \[1, --layers 2\] \(got 3\)" "${moe[@]}" --moe-every 3 --steps 1
expect_error "--capacity-factor must be 0 \(dropless\) or positive" "${moe[@]}" --capacity-factor -1 --steps 1
expect_error "--aux-loss-coef must be non-negative" "${moe[@]}" --aux-loss-coef -0.5 --steps 1
expect_error "--experts must be 0 \(dense\) or positive" "${shape[@]}" --experts -2 --steps 1

# Expert TP (+SP), with EP, and bf16 train from the CLI and report the same routing figures
# (tests/engine/moe_tp_bf16_equality_test.cc checks their numbers against the serial run).
for layout in "--tp 2" "--tp 2 --sequence-parallel" "--dp 2 --ep 2 --tp 2 --sequence-parallel" \
  "--precision bf16" "--dp 2 --ep 2 --precision bf16" "--pp 2 --microbatches 2 --schedule zb-h1"; do
  # shellcheck disable=SC2086
  "$DTRAIN" "${moe[@]}" $layout --steps 3 --json > "$tmp/l.json" 2> "$tmp/l.err" ||
    fail "MoE $layout exited $?: $(tail -2 "$tmp/l.err")"
  python3 - "$tmp/l.json" <<'PY' || fail "MoE $layout: routing report"
import json, sys
j = json.load(open(sys.argv[1]))
rows = j["moe"]["steps"]
tokens = j["run"]["tokens_per_step"]
assert len(rows) == 3, rows
for r in rows:
    assert r["assignments"] == tokens * 2 * 2 and sum(r["expert_tokens"]) == r["assignments"], r
PY
  echo "MoE $layout: 3 steps, routing consistent, losses $(python3 -c "import json; print(json.load(open('$tmp/l.json'))['train_losses'])")"
done

# Expert TP with full recompute: the rerun forward repeats attention's and the experts'
# all-reduces (and under EP its exchanges); every rank's bytes equal plan/'s, the recompute row's
# included (plan::moe_tp_rerun_collectives_per_layer with the rows the forward routed).
for layout in "--tp 2" "--tp 2 --sequence-parallel" "--dp 2 --ep 2 --tp 2 --sequence-parallel"; do
  # shellcheck disable=SC2086
  "$DTRAIN" "${moe[@]}" $layout --recompute full --steps 3 --json > "$tmp/r.json" 2> "$tmp/r.err" ||
    fail "MoE $layout --recompute full exited $?: $(tail -2 "$tmp/r.err")"
  python3 - "$tmp/r.json" "$layout" <<'PY' || fail "MoE $layout --recompute full: bytes vs plan"
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["layout"]["ranks"]:
    m, p = r["bytes_per_step"], r["plan_bytes_per_step"]
    for k in ("tp_block", "tp_regather", "tp_recompute", "ep", "dp"):
        assert m[k] == p[k], (r["rank"], k, m[k], p[k])
    assert m["tp_recompute"] > 0, r["rank"]
r0 = j["layout"]["ranks"][0]["bytes_per_step"]
print(f"MoE {sys.argv[2]} --recompute full: rank 0 tp_recompute {r0['tp_recompute']:.0f} B/step"
      f" = plan, losses {j['train_losses']}")
PY
done

# Routed and dense blocks mixed (--moe-every 2: blocks 1 and 3 route): the planned rank peak
# counts each block's own tensors, so the serial run's measured peak equals it, and the pipeline
# split runs.
for layout in "" "--pp 2"; do
  # shellcheck disable=SC2086
  "$DTRAIN" train --model tiny --layers 4 --experts 4 --top-k 2 --moe-every 2 --steps 2 \
    --eval-every 0 $layout --json > "$tmp/e.json" 2> "$tmp/e.err" ||
    fail "--moe-every 2 $layout exited $?: $(tail -2 "$tmp/e.err")"
done
"$DTRAIN" train --model tiny --layers 4 --experts 4 --top-k 2 --moe-every 2 --steps 2 \
  --eval-every 0 --json > "$tmp/e.json" 2> "$tmp/e.err" || fail "--moe-every 2 exited $?"
python3 - "$tmp/e.json" <<'PY' || fail "--moe-every 2: measured peak differs from the plan"
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
assert m["peak_total_bytes"] == m["planned_peak_total_bytes"], m
print("ok: --moe-every 2 measured peak", m["peak_total_bytes"], "= plan")
PY
finish
