#!/usr/bin/env bash
# Expert tensor parallelism from the CLI on a tiny MoE model (L2 C32 NH4 T16 B4, E=4, k=2): a
# dp 2 ep 2 tp 2 + SP run reports every rank's TP block, re-gather and EP bytes equal to plan/'s
# figures; a checkpoint saved there (experts cut by EP and TP) resumes at dp 2 without EP or TP,
# and one saved at dp 2 resumes at dp 2 ep 2 tp 2, each ending where the uninterrupted run ends.
# Usage: moe_tp_checkpoint.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
m4=(train --layers 2 --hidden 32 --heads 4 --context 16 --eval-every 0 --experts 4 --top-k 2
  --global-batch 4)
etp=(--dp 2 --ep 2 --tp 2 --sequence-parallel)

# losses_close A.json B.json: the train losses of two runs agree to 1e-5; prints the max diff.
losses_close() {
  python3 - "$@" <<'PY'
import json, sys
a = [s["loss"] for s in json.load(open(sys.argv[1]))["train_losses"]]
b = [s["loss"] for s in json.load(open(sys.argv[2]))["train_losses"]]
a, b = a[-len(b):], b[-len(a):]  # a resumed run reports its own steps only
d = max(abs(x - y) for x, y in zip(a, b))
print(f"max loss diff {d:.2e} over {len(a)} steps")
assert d <= 1e-5, (a, b)
PY
}

"$DTRAIN" "${m4[@]}" "${etp[@]}" --steps 6 --json > "$tmp/etp.json" 2> /dev/null ||
  fail "${etp[*]} exited $?"
python3 - "$tmp/etp.json" <<'PY' || fail "expert TP report"
import json, sys
l = json.load(open(sys.argv[1]))["layout"]
for r in l["ranks"]:
    m, p = r["bytes_per_step"], r["plan_bytes_per_step"]
    for k in ("tp_block", "tp_regather", "ep", "dp"):
        assert m[k] == p[k], (r["rank"], k, m[k], p[k])
    assert m["tp_block"] > 0 and m["ep"] > 0, r["rank"]
print("dp 2 ep 2 tp 2 +SP: per rank tp_block",
      [r["bytes_per_step"]["tp_block"] for r in l["ranks"]], "ep",
      [r["bytes_per_step"]["ep"] for r in l["ranks"]], "B/step = plan")
PY
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --json > "$tmp/dp.json" 2> /dev/null || fail "--dp 2 exited"
echo -n "dp 2 ep 2 tp 2 +SP vs dp 2: " && losses_close "$tmp/etp.json" "$tmp/dp.json" ||
  fail "expert TP losses"

"$DTRAIN" "${m4[@]}" "${etp[@]}" --steps 6 --save "$tmp/a" --save-every 3 > /dev/null 2>&1 ||
  fail "--save under ${etp[*]} exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --resume "$tmp/a/step-00000003" --json > "$tmp/r1.json" \
  2> /dev/null || fail "resume of an expert-TP checkpoint at --dp 2 exited $?"
echo -n "saved at ${etp[*]}, resumed at --dp 2: " && losses_close "$tmp/r1.json" "$tmp/dp.json" ||
  fail "expert TP -> dp resume"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --save "$tmp/b" --save-every 3 > /dev/null 2>&1 ||
  fail "--save at --dp 2 exited $?"
"$DTRAIN" "${m4[@]}" "${etp[@]}" --steps 6 --resume "$tmp/b/step-00000003" --json \
  > "$tmp/r2.json" 2> /dev/null || fail "resume of a dp checkpoint under ${etp[*]} exited $?"
echo -n "saved at --dp 2, resumed at ${etp[*]}: " && losses_close "$tmp/r2.json" "$tmp/dp.json" ||
  fail "dp -> expert TP resume"
finish
