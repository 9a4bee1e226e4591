#!/usr/bin/env bash
# `dtrain train --ep N`: expert parallelism carved from --dp on a tiny MoE model (L2 C32 NH4 T16,
# E=4, k=2). A dp 4 ep 2 run reports EP 2, expert-DP 2 and 2 experts per rank, and every rank's
# all-to-all and DP bytes equal plan/'s figures in the JSON; its losses equal the same run
# without EP to 1e-5; --trace puts the exchanges on each rank's communication track; a
# checkpoint saved under EP resumes without EP (and one saved without EP resumes under EP)
# ending where the uninterrupted run ends; a model whose replicated experts exceed
# --max-rank-memory is refused and trains with --ep 2 (and --ep 2 --pp 2 under a cap --pp 2
# alone exceeds); under mpirun two EP layouts give the threads backend's losses bit for bit;
# bench ep runs; bad --ep values are refused naming the flag.
# Usage: ep_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
moe=(train --layers 2 --hidden 32 --heads 4 --context 16 --eval-every 0 --experts 4 --top-k 2)
m4=("${moe[@]}" --global-batch 4)

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

"$DTRAIN" "${m4[@]}" --dp 4 --ep 2 --steps 6 --json > "$tmp/ep.json" 2> /dev/null ||
  fail "--dp 4 --ep 2 exited $?"
python3 - "$tmp/ep.json" <<'PY' || fail "EP report"
import json, sys
l = json.load(open(sys.argv[1]))["layout"]
assert (l["ep"], l["expert_dp"], l["experts_per_rank"]) == (2, 2, 2), l
for r in l["ranks"]:
    m, p = r["bytes_per_step"], r["plan_bytes_per_step"]
    assert m["ep"] > 0 and m["ep"] == p["ep"], (r["rank"], m["ep"], p["ep"])
    assert m["dp"] == p["dp"], (r["rank"], m["dp"], p["dp"])
print("ep 2 of dp 4: EP bytes/step per rank", [r["bytes_per_step"]["ep"] for r in l["ranks"]],
      "= plan; DP bytes = plan")
PY
expect_output 'EP\(2\) expert-DP\(2\) 2 experts/rank' "${m4[@]}" --dp 4 --ep 2 --steps 2
"$DTRAIN" "${m4[@]}" --dp 4 --steps 6 --json > "$tmp/dp.json" 2> /dev/null || fail "--dp 4 exited"
echo -n "dp 4 ep 2 vs dp 4: " && losses_close "$tmp/ep.json" "$tmp/dp.json" || fail "EP losses"

# --trace: each rank's dispatch and combine (forward and backward) and row-count exchanges on its
# communication track (tid 4r+1): 5 per routed block of the last step.
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --steps 2 --trace "$tmp/trace.json" > /dev/null 2>&1 ||
  fail "--trace under --ep exited $?"
python3 - "$tmp/trace.json" <<'PY' || fail "EP spans in the trace"
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
ep = [e for e in ev if "EP" in str(e.get("name"))]
for r in (0, 1):
    mine = [e for e in ep if e.get("tid") == 4 * r + 1]
    assert len(mine) == 10, (r, len(mine))
print("ok: trace: 10 EP exchanges per rank on the communication track:",
      sorted({e["name"] for e in ep}))
PY

# Checkpoints reshard between EP and non-EP layouts.
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --steps 6 --save "$tmp/a" --save-every 3 > /dev/null 2>&1 ||
  fail "--save under --ep exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --resume "$tmp/a/step-00000003" --json > "$tmp/r1.json" \
  2> /dev/null || fail "resume of an EP checkpoint without EP exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --json > "$tmp/full.json" 2> /dev/null || fail "dp 2 run"
echo -n "saved at --ep 2, resumed at --dp 2: " && losses_close "$tmp/r1.json" "$tmp/full.json" ||
  fail "EP -> non-EP resume"
"$DTRAIN" "${m4[@]}" --dp 2 --steps 6 --save "$tmp/b" --save-every 3 > /dev/null 2>&1 ||
  fail "--save without EP exited $?"
"$DTRAIN" "${m4[@]}" --dp 2 --ep 2 --steps 6 --resume "$tmp/b/step-00000003" --json \
  > "$tmp/r2.json" 2> /dev/null || fail "resume of a dense-layout checkpoint under EP exited $?"
echo -n "saved at --dp 2, resumed at --ep 2: " && losses_close "$tmp/r2.json" "$tmp/full.json" ||
  fail "non-EP -> EP resume"

# A run that only fits because of EP: 16 experts of C=64 on 2 blocks replicated need 17.4 MiB a
# rank by the plan/ formulas (8.8 MiB with --pp 2); with --ep 2 each rank holds 8 of them.
big=(train --layers 2 --hidden 64 --heads 4 --context 16 --global-batch 4 --eval-every 0 --experts 16
  --top-k 2 --steps 2 --dp 2)
expect_error '--max-rank-memory 12.0 MiB: a rank of pipeline stage 0 needs' "${big[@]}" \
  --max-rank-memory 12MiB
expect_output 'at end' "${big[@]}" --ep 2 --max-rank-memory 12MiB
expect_error '--max-rank-memory 6.0 MiB: a rank of pipeline stage 0 needs' "${big[@]}" --pp 2 \
  --microbatches 2 --max-rank-memory 6MiB
expect_output 'at end' "${big[@]}" --ep 2 --pp 2 --microbatches 2 --max-rank-memory 6MiB

# Under mpirun the same layouts give the threads backend's losses bit for bit (the same
# algorithms in the same order: pairwise all-to-alls, the DP syncs).
if command -v mpirun > /dev/null; then
  run=("${moe[@]}" --global-batch 8 --steps 3 --json)
  for layout in "--dp 4 --ep 2" "--dp 2 --ep 2 --pp 2 --microbatches 2"; do
    # shellcheck disable=SC2086
    threads=$("$DTRAIN" "${run[@]}" $layout 2> /dev/null | tr -d ' \n' |
      grep -o '"train_losses":\[[^]]*\]')
    # shellcheck disable=SC2086
    mpi=$(mpirun --allow-run-as-root --oversubscribe -np 4 "$DTRAIN" "${run[@]}" $layout \
      --backend mpi 2> /dev/null | tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]')
    if [ -n "$threads" ] && [ "$threads" = "$mpi" ]; then
      echo "ok: $layout: mpirun -np 4 --backend mpi losses == threads: $mpi"
    else
      fail "$layout: threads $threads, mpi $mpi"
    fi
  done
fi

# bench ep (a build with benchmarks): the EP step holds less memory per rank and moves bytes.
if "$DTRAIN" bench ep --help > /dev/null 2>&1; then
  "$DTRAIN" bench ep --hidden 32 --warmup 0 --steps 1 --rounds 1 --json > "$tmp/bench.json" \
    2> /dev/null || fail "bench ep exited $?"
  python3 - "$tmp/bench.json" <<'PY' || fail "bench ep figures"
import json, sys
j = json.load(open(sys.argv[1]))
assert 0 < j["memory_ratio"] < 1 and j["time_ratio"] > 0, j
assert j["expert_parallel"]["ep_bytes_per_step"] > 0 == j["replicated"]["ep_bytes_per_step"], j
print(f"ok: bench ep: memory ratio {j['memory_ratio']:.3f}, time ratio {j['time_ratio']:.3f}")
PY
fi

# Bad values, each naming the flag.
expect_error '--ep 3 does not divide --dp 4' "${m4[@]}" --dp 4 --ep 3 --steps 1
expect_error '--ep 4 does not divide --experts 6' train --layers 2 --hidden 32 --heads 4 \
  --context 16 --global-batch 4 --experts 6 --top-k 2 --dp 4 --ep 4 --steps 1
expect_error '--ep 2 needs a mixture-of-experts model' train --layers 2 --hidden 32 --heads 4 \
  --context 16 --global-batch 4 --dp 2 --ep 2 --steps 1
expect_error '--ep must be at least 1' "${moe[@]}" --ep 0 --steps 1
expect_error '--ep 2 with --dp-all-reduce hierarchical is not supported' \
  "${m4[@]}" --dp 2 --ep 2 --dp-all-reduce hierarchical --ranks-per-node 1 --steps 1
finish
