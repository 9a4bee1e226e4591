#!/usr/bin/env bash
# `dtrain train --ep N` with ZeRO and full recompute on a tiny MoE model (L2 C32 NH4 T16, E=4,
# k=2). dp 4 ep 2 at --zero 1, 2, 3: every rank's params / grads / optimizer bytes equal the
# report's plan figure and the two-group sum recomputed here (dense state over 4 ranks, the
# rank's 2 experts per block over its 2 expert-DP ranks), its DP and EP bytes equal plan/'s, and
# the losses equal the same --zero without EP to 1e-5. --recompute full reruns the exchanges
# (EP bytes = plan, more than without) with the same losses. A checkpoint saved at --ep 2
# --zero 3 resumes at --dp 2 without EP (and one saved at --zero 1 resumes at --ep 2 --zero 2)
# ending where the uninterrupted run ends. Under mpirun dp 4 ep 2 zero 3 gives the threads
# backend's losses bit for bit.
# Usage: ep_zero_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
m4=(train --layers 2 --hidden 32 --heads 4 --context 16 --eval-every 0 --experts 4 --top-k 2
  --global-batch 4)

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

for zero in 1 2 3; do
  "$DTRAIN" "${m4[@]}" --dp 4 --ep 2 --zero $zero --steps 4 --json > "$tmp/ep$zero.json" \
    2> /dev/null || fail "--dp 4 --ep 2 --zero $zero exited $?"
  python3 - "$tmp/ep$zero.json" $zero <<'PY' || fail "EP ZeRO-$zero report"
import json, math, sys
l = json.load(open(sys.argv[1]))["layout"]
zero = int(sys.argv[2])
C = 32
experts = 2 * 2 * (8 * C * C + 5 * C)  # 2 blocks x E/ep = 2 experts x (fc, proj, biases)
def state(n, ranks):  # ZeRO's per-rank fp32 AdamW state: params, grads, moments
    s = math.ceil(n / ranks)
    return [4 * (s if zero == 3 else n), 4 * (s if zero >= 2 else n), 8 * s]
for r in l["ranks"]:
    dense = r["param_count"] - experts
    want = [a + b for a, b in zip(state(dense, 4), state(experts, 2))]
    got = [s["current_bytes"] for s in r["state"]]
    assert got == want == [s["plan_bytes"] for s in r["state"]], (r["rank"], got, want)
    m, p = r["bytes_per_step"], r["plan_bytes_per_step"]
    assert m["dp"] > 0 and m["dp"] == p["dp"], (r["rank"], m["dp"], p["dp"])
    assert m["ep"] > 0 and m["ep"] == p["ep"], (r["rank"], m["ep"], p["ep"])
r = l["ranks"][0]
print(f"ok: dp 4 ep 2 zero {zero}: rank 0 state", [s["current_bytes"] for s in r["state"]],
      f"= plan = dense/4 + experts/2; DP {r['bytes_per_step']['dp']:.0f} B/step = plan,",
      f"EP {r['bytes_per_step']['ep']:.0f} B/step = plan")
PY
  "$DTRAIN" "${m4[@]}" --dp 4 --zero $zero --steps 4 --json > "$tmp/dp$zero.json" 2> /dev/null ||
    fail "--dp 4 --zero $zero exited $?"
  echo -n "dp 4 ep 2 zero $zero vs dp 4 zero $zero: " &&
    losses_close "$tmp/ep$zero.json" "$tmp/dp$zero.json" || fail "EP ZeRO-$zero losses"
done

# Full recompute: the rerun forward exchanges again (plan::ep_forward_exchanges).
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --steps 3 --json > "$tmp/rc0.json" 2> /dev/null ||
  fail "--dp 2 --ep 2 exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --recompute full --steps 3 --json > "$tmp/rc.json" \
  2> /dev/null || fail "--dp 2 --ep 2 --recompute full exited $?"
python3 - "$tmp/rc.json" "$tmp/rc0.json" <<'PY' || fail "EP recompute report"
import json, sys
full = json.load(open(sys.argv[1]))["layout"]["ranks"]
none = json.load(open(sys.argv[2]))["layout"]["ranks"]
for f, n in zip(full, none):
    m, p = f["bytes_per_step"]["ep"], f["plan_bytes_per_step"]["ep"]
    assert m == p and m > n["bytes_per_step"]["ep"], (f["rank"], m, p, n["bytes_per_step"]["ep"])
print("ok: --recompute full: EP bytes/step", [f["bytes_per_step"]["ep"] for f in full],
      "= plan, without recompute", [n["bytes_per_step"]["ep"] for n in none])
PY
echo -n "ep 2 recompute full vs none: " && losses_close "$tmp/rc.json" "$tmp/rc0.json" ||
  fail "EP recompute losses"

# Checkpoints reshard between EP with ZeRO and other layouts.
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --zero 3 --steps 6 --save "$tmp/a" --save-every 3 \
  > /dev/null 2>&1 || fail "--save under --ep 2 --zero 3 exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --resume "$tmp/a/step-00000003" --json > "$tmp/r1.json" \
  2> /dev/null || fail "resume of an EP ZeRO-3 checkpoint at --dp 2 exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --json > "$tmp/full.json" 2> /dev/null || fail "dp 2 run"
echo -n "saved at --ep 2 --zero 3, resumed at --dp 2: " &&
  losses_close "$tmp/r1.json" "$tmp/full.json" || fail "EP ZeRO-3 -> dp resume"
"$DTRAIN" "${m4[@]}" --dp 2 --zero 1 --steps 6 --save "$tmp/b" --save-every 3 > /dev/null 2>&1 ||
  fail "--save at --zero 1 exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --zero 2 --steps 6 --resume "$tmp/b/step-00000003" --json \
  > "$tmp/r2.json" 2> /dev/null || fail "resume at --ep 2 --zero 2 exited $?"
echo -n "saved at --dp 2 --zero 1, resumed at --ep 2 --zero 2: " &&
  losses_close "$tmp/r2.json" "$tmp/full.json" || fail "dp ZeRO-1 -> EP ZeRO-2 resume"

# Under mpirun the same layout gives the threads backend's losses bit for bit.
if command -v mpirun > /dev/null; then
  run=(train --layers 2 --hidden 32 --heads 4 --context 16 --eval-every 0 --experts 4 --top-k 2
    --global-batch 8 --steps 3 --json --dp 4 --ep 2 --zero 3)
  threads=$("$DTRAIN" "${run[@]}" 2> /dev/null | tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]')
  mpi=$(mpirun --allow-run-as-root --oversubscribe -np 4 "$DTRAIN" "${run[@]}" --backend mpi \
    2> /dev/null | tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]')
  if [ -n "$threads" ] && [ "$threads" = "$mpi" ]; then
    echo "ok: --dp 4 --ep 2 --zero 3: mpirun -np 4 --backend mpi losses == threads: $mpi"
  else
    fail "--dp 4 --ep 2 --zero 3: threads $threads, mpi $mpi"
  fi
fi
finish
