#!/usr/bin/env bash
# `dtrain train --ep N --precision bf16` with ZeRO 1-3 and --grad-reduce bf16 on a tiny MoE model
# (L2 C32 NH4 T16, E=4, k=2). dp 4 ep 2 at --zero 1, 2, 3: every rank's params / grads /
# optimizer bytes equal the report's plan figure and the mixed-precision two-group sum
# recomputed here (bf16 weights and gradients, the fp32 master and moments of the shard; dense
# state over 4 ranks, the rank's 2 experts per block over its 2 expert-DP ranks), its DP and EP
# bytes equal plan/'s. The losses: --zero 1 equals --zero 0 bit for bit (both round each rank's
# gradient before the average), --zero 3 equals --zero 2 (both round the fp32 average once), and
# 2-3 stay within 1e-3 of 0-1. --grad-reduce bf16 at --zero 2: bytes = plan. A checkpoint saved
# at --ep 2 --zero 3 --precision bf16 (fp32 master weights and moments) resumes at --ep 2
# --zero 2 ending bit for bit where the uninterrupted --zero 3 run ends (the two stages compute
# the same bits), and at --dp 2 without EP within 1e-3 of the uninterrupted dp 2 run (bf16 EP
# rounds the expert gradients' average in another place than dp 2 does); one saved at --dp 2
# resumes at --ep 2 --zero 1 within the same bound. Under mpirun dp 4 ep 2 at --zero 1 and 3
# gives the threads backend's losses bit for bit.
# Usage: ep_bf16_zero_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
m4=(train --layers 2 --hidden 32 --heads 4 --context 16 --eval-every 0 --experts 4 --top-k 2
  --global-batch 4 --precision bf16)

# losses_close A.json B.json TOL: the train losses of two runs agree to TOL (0: bit for bit).
losses_close() {
  python3 - "$@" <<'PY'
import json, sys
a = [s["loss"] for s in json.load(open(sys.argv[1]))["train_losses"]]
b = [s["loss"] for s in json.load(open(sys.argv[2]))["train_losses"]]
tol = float(sys.argv[3])
a, b = a[-len(b):], b[-len(a):]  # a resumed run reports its own steps only
d = max(abs(x - y) for x, y in zip(a, b))
print(f"max loss diff {d:.2e} over {len(a)} steps (tolerance {tol:g})")
assert d <= tol, (a, b)
PY
}

for zero in 0 1 2 3; do
  "$DTRAIN" "${m4[@]}" --dp 4 --ep 2 --zero $zero --steps 4 --json > "$tmp/ep$zero.json" \
    2> /dev/null || fail "--dp 4 --ep 2 --zero $zero --precision bf16 exited $?"
  python3 - "$tmp/ep$zero.json" $zero <<'PY' || fail "bf16 EP ZeRO-$zero report"
import json, math, sys
l = json.load(open(sys.argv[1]))["layout"]
zero = int(sys.argv[2])
C = 32
experts = 2 * 2 * (8 * C * C + 5 * C)  # 2 blocks x E/ep = 2 experts x (fc, proj, biases)
def state(n, ranks):  # mixed-precision AdamW: bf16 params and grads, fp32 master + moments
    s = math.ceil(n / ranks) if zero > 0 else n
    return [2 * (s if zero == 3 else n), 2 * (s if zero >= 2 else n), 12 * s]
for r in l["ranks"]:
    dense = r["param_count"] - experts
    want = [a + b for a, b in zip(state(dense, 4), state(experts, 2))]
    got = [s["current_bytes"] for s in r["state"]]
    assert got == want == [s["plan_bytes"] for s in r["state"]], (r["rank"], got, want)
    m, p = r["bytes_per_step"], r["plan_bytes_per_step"]
    assert m["dp"] > 0 and m["dp"] == p["dp"], (r["rank"], m["dp"], p["dp"])
    assert m["ep"] > 0 and m["ep"] == p["ep"], (r["rank"], m["ep"], p["ep"])
r = l["ranks"][0]
print(f"ok: dp 4 ep 2 zero {zero} bf16: rank 0 state", [s["current_bytes"] for s in r["state"]],
      f"= plan = dense/4 + experts/2; DP {r['bytes_per_step']['dp']:.0f} B/step = plan,",
      f"EP {r['bytes_per_step']['ep']:.0f} B/step = plan")
PY
done
echo -n "bf16 dp 4 ep 2 zero 1 vs zero 0: " && losses_close "$tmp/ep1.json" "$tmp/ep0.json" 0 ||
  fail "bf16 EP ZeRO-1 losses"
echo -n "bf16 dp 4 ep 2 zero 3 vs zero 2: " && losses_close "$tmp/ep3.json" "$tmp/ep2.json" 0 ||
  fail "bf16 EP ZeRO-3 losses"
echo -n "bf16 dp 4 ep 2 zero 2 vs zero 0: " &&
  losses_close "$tmp/ep2.json" "$tmp/ep0.json" 1e-3 || fail "bf16 EP ZeRO-2 losses"

"$DTRAIN" "${m4[@]}" --dp 4 --ep 2 --zero 2 --grad-reduce bf16 --steps 4 --json \
  > "$tmp/wire.json" 2> /dev/null || fail "--grad-reduce bf16 --ep 2 --zero 2 exited $?"
python3 - "$tmp/wire.json" "$tmp/ep2.json" <<'PY' || fail "bf16 wire report"
import json, sys
wire = json.load(open(sys.argv[1]))["layout"]["ranks"]
fp32 = json.load(open(sys.argv[2]))["layout"]["ranks"]
for w, f in zip(wire, fp32):
    m, p = w["bytes_per_step"]["dp"], w["plan_bytes_per_step"]["dp"]
    # Half the gradient bytes on the wire; the bf16 parameter gathers are the same.
    assert m == p and 0 < m < f["bytes_per_step"]["dp"], (w["rank"], m, p)
print("ok: --grad-reduce bf16 --zero 2: DP bytes/step", [w["bytes_per_step"]["dp"] for w in wire],
      "= plan, fp32 wire", [f["bytes_per_step"]["dp"] for f in fp32])
PY
echo -n "bf16 wire zero 2 vs fp32 wire zero 2: " &&
  losses_close "$tmp/wire.json" "$tmp/ep2.json" 1e-3 || fail "bf16 wire losses"

# Checkpoints reshard between bf16 EP with ZeRO and other layouts.
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --zero 3 --steps 6 --save "$tmp/a" --save-every 3 \
  > /dev/null 2>&1 || fail "--save under --ep 2 --zero 3 --precision bf16 exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --zero 3 --steps 6 --json > "$tmp/ep_full.json" 2> /dev/null ||
  fail "dp 2 ep 2 zero 3 run"
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --zero 2 --steps 6 --resume "$tmp/a/step-00000003" --json \
  > "$tmp/r0.json" 2> /dev/null || fail "resume at --ep 2 --zero 2 --precision bf16 exited $?"
echo -n "bf16 saved at --ep 2 --zero 3, resumed at --ep 2 --zero 2: " &&
  losses_close "$tmp/r0.json" "$tmp/ep_full.json" 0 || fail "bf16 EP ZeRO-3 -> ZeRO-2 resume"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --resume "$tmp/a/step-00000003" --json > "$tmp/r1.json" \
  2> /dev/null || fail "resume of a bf16 EP ZeRO-3 checkpoint at --dp 2 exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --json > "$tmp/full.json" 2> /dev/null || fail "dp 2 run"
echo -n "bf16 saved at --ep 2 --zero 3, resumed at --dp 2: " &&
  losses_close "$tmp/r1.json" "$tmp/full.json" 1e-3 || fail "bf16 EP ZeRO-3 -> dp resume"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --save "$tmp/b" --save-every 3 > /dev/null 2>&1 ||
  fail "--save at --dp 2 --precision bf16 exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --zero 1 --steps 6 --resume "$tmp/b/step-00000003" --json \
  > "$tmp/r2.json" 2> /dev/null || fail "resume at --ep 2 --zero 1 --precision bf16 exited $?"
echo -n "bf16 saved at --dp 2, resumed at --ep 2 --zero 1: " &&
  losses_close "$tmp/r2.json" "$tmp/full.json" 1e-3 || fail "dp -> bf16 EP ZeRO-1 resume"

# Under mpirun the same layout gives the threads backend's losses bit for bit.
if command -v mpirun > /dev/null; then
  for zero in 1 3; do
    run=("${m4[@]}" --steps 3 --json --dp 4 --ep 2 --zero $zero)
    threads=$("$DTRAIN" "${run[@]}" 2> /dev/null | tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]')
    mpi=$(mpirun --allow-run-as-root --oversubscribe -np 4 "$DTRAIN" "${run[@]}" --backend mpi \
      2> /dev/null | tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]')
    if [ -n "$threads" ] && [ "$threads" = "$mpi" ]; then
      echo "ok: bf16 --dp 4 --ep 2 --zero $zero: mpirun -np 4 --backend mpi losses == threads: $mpi"
    else
      fail "bf16 --dp 4 --ep 2 --zero $zero: threads $threads, mpi $mpi"
    fi
  done
fi
finish
