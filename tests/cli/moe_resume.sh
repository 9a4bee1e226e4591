#!/usr/bin/env bash
# A resume of an MoE checkpoint names the MoE field that differs, with both values: the experts,
# top-k and moe-every shape tensors and are refused whatever the flags (a dense run of an MoE
# checkpoint, and the reverse, too); the capacity factor and the aux coefficient are training
# settings: refused by name without --allow-resume-changes, trained on with it.
# Usage: moe_resume.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(train --layers 2 --hidden 32 --heads 4 --context 16 --seq-length 16 --global-batch 4 --eval-every 0)
moe=(--experts 4 --top-k 2 --capacity-factor 1.5 --aux-loss-coef 0.01)

"$DTRAIN" "${base[@]}" "${moe[@]}" --steps 4 --save-every 2 --save "$tmp/ck" > /dev/null 2>&1 ||
  fail "the MoE run to resume from exited $?"
"$DTRAIN" "${base[@]}" --steps 4 --save-every 2 --save "$tmp/dense" > /dev/null 2>&1 ||
  fail "the dense run to resume from exited $?"
resume=("${base[@]}" --steps 4 --resume "$tmp/ck/step-00000002")

expect_error 'written with other MoE routing settings: aux-loss-coef 0.01 \(this run: 0.02\).*--allow-resume-changes' \
  "${resume[@]}" --experts 4 --top-k 2 --capacity-factor 1.5 --aux-loss-coef 0.02
expect_error 'written with other MoE routing settings: capacity-factor 1.5 \(this run: 2\)' \
  "${resume[@]}" --experts 4 --top-k 2 --capacity-factor 2 --aux-loss-coef 0.01
expect_error 'written for another model shape: top-k 2 \(this run: 1\)' \
  "${resume[@]}" --experts 4 --top-k 1 --capacity-factor 1.5 --aux-loss-coef 0.01
expect_error 'written for another model shape: top-k 2 \(this run: 1\)' \
  "${resume[@]}" --experts 4 --top-k 1 --capacity-factor 1.5 --allow-resume-changes
expect_error 'written for another model shape: experts 4 \(this run: dense\)' "${resume[@]}"
expect_error 'written for another model shape: dense \(this run: experts 4\)' \
  "${base[@]}" --steps 4 --resume "$tmp/dense/step-00000002" "${moe[@]}"

# --allow-resume-changes trains on with the new routing settings and records them.
if "$DTRAIN" "${resume[@]}" --experts 4 --top-k 2 --capacity-factor 2 --aux-loss-coef 0.02 \
  --allow-resume-changes --save "$tmp/ck2" > /dev/null 2> "$tmp/err"; then
  python3 - "$tmp/ck2/step-00000004/manifest.json" <<'PY' || fail "the resumed run's manifest"
import json, sys
m = json.load(open(sys.argv[1]))["model"]["moe"]
assert m["capacity_factor"] == 2 and m["aux_loss_coef"] == 0.02, m
print("ok: resumed with capacity-factor 2, aux-loss-coef 0.02:", m)
PY
else
  fail "--allow-resume-changes with new MoE routing settings exited non-zero: $(head -2 "$tmp/err")"
fi
finish
