# scripts/gpu-clock-check: `compare` prices the H200 measurement kept in docs/measurements with
# `dtrain plan` (every error recomputed from the JSON, one row priced again by hand, the measured
# rates read back from the timings), its text table, its refusals, and `measure`'s refusal where
# no CUDA device (or no PyTorch) is found. With PyTorch here, `measure --device cpu --quick` runs.
source "$(dirname "$0")/lib/expect.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
script="$root/scripts/gpu-clock-check"
measured="$root/docs/measurements/h200-eager.json"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

python3 "$script" --help | grep -q "compare" || fail "--help does not name compare"
python3 "$script" measure --help | grep -q -- "--profile" || fail "measure --help lacks --profile"

python3 "$script" compare "$measured" --dtrain "$DTRAIN" --json >"$dir/cmp.json" ||
  fail "compare --json exited non-zero"
"$DTRAIN" plan --cluster 1x1xH200 --print-cluster >"$dir/h200.json" ||
  fail "plan --print-cluster 1x1xH200 exited non-zero"
# One row priced again here, with the flags written out.
"$DTRAIN" plan --cluster 1x1xH200 --family gpt --layers 24 --hidden 2048 --heads 16 \
  --vocab 50304 --seq-length 2048 --global-batch 8 --micro-batch 2 --recompute full \
  --precision megatron --json >"$dir/row.json" || fail "plan of the h2048 b2 full row failed"
python3 - "$dir/cmp.json" "$measured" "$dir/h200.json" "$dir/row.json" <<'PY' ||
import json, statistics, sys
cmp_, meas, preset, row = (json.load(open(p)) for p in sys.argv[1:5])
runs = meas["runs"]
assert len(cmp_["rows"]) == len(runs) == 18, (len(cmp_["rows"]), len(runs))
cols = ("frozen", "measured_rates", "datasheet")
for r, m in zip(cmp_["rows"], runs):
    assert (r["name"], r["micro_batch"], r["recompute"]) == (m["name"], m["micro_batch"],
                                                             m["recompute"]), r
    assert r["measured_ms"] == m["step_ms"], r
    for c in cols:
        p = r[c]
        want = 100.0 * (p["step_ms"] - m["step_ms"]) / m["step_ms"]
        assert abs(p["error_pct"] - want) < 1e-9, (r["name"], c, p["error_pct"], want)
        assert p["step_ms"] > 0 and p["compute_ms"] > 0, (r["name"], c)
    # Every efficiency 1 and no fixed cost is the fastest any rates can price.
    assert r["datasheet"]["step_ms"] <= r["measured_rates"]["step_ms"], r["name"]
    assert r["datasheet"]["step_ms"] <= r["frozen"]["step_ms"], r["name"]
for c in cols:
    errs = [abs(r[c]["error_pct"]) for r in cmp_["rows"]]
    s = cmp_["summary"][c]
    assert abs(s["mean_abs_error_pct"] - statistics.mean(errs)) < 1e-9, c
    assert abs(s["worst_abs_error_pct"] - max(errs)) < 1e-9, c
frozen, timed, mr = (cmp_["rates"][k] for k in ("frozen", "timed", "measured"))
assert frozen == preset["gpu"]["rates"], "the frozen column is not the preset's rates"
peak, bandwidth = preset["gpu"]["peak_flops"], frozen["memory_bytes_per_s"]
assert abs(mr["gemm_efficiency"] - timed["gemm_bf16_flops_per_s"] / peak) < 1e-12
assert abs(mr["memory_efficiency"] - timed["add_bytes_per_s"] / bandwidth) < 1e-12
assert abs(mr["kernel_overhead_us"] - timed["graph_kernel_s"] * 1e6) < 1e-9
full = [r for r in cmp_["rows"] if r["name"] == "h2048 L24" and r["micro_batch"] == 2
        and r["recompute"] == "full"][0]
assert abs(full["frozen"]["step_ms"] - row["plan"]["time"]["step_s"] * 1e3) < 1e-6, full
print("ok: compare's rows, errors, summaries and rates follow from the measurement")
PY
  fail "compare's JSON does not follow from the measurement"

out=$(python3 "$script" compare "$measured" --dtrain "$DTRAIN")
grep -qE "^frozen +mean \|error\| [0-9.]+%" <<<"$out" || fail "text summary missing: $out"
grep -qE "^h8192 L4 +1 full +[0-9.]+ +[0-9.]+ +[-+][0-9.]+" <<<"$out" || fail "text row missing"

# Refusals, each naming what is wrong.
err=$(python3 "$script" compare "$dir/none.json" --dtrain "$DTRAIN" 2>&1)
[ $? -eq 2 ] && grep -q "none.json" <<<"$err" || fail "a missing MEASURED file: $err"
err=$(python3 "$script" compare "$measured" --dtrain "$dir/nodtrain" 2>&1)
[ $? -eq 2 ] && grep -q -- "--dtrain" <<<"$err" || fail "a missing --dtrain: $err"
err=$(python3 "$script" compare "$measured" --dtrain "$DTRAIN" --cluster 1x1xB300 2>&1)
[ $? -eq 2 ] && grep -q -- "--cluster" <<<"$err" || fail "an unknown --cluster: $err"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "ok: a CUDA device is here; measure's refusal not checked"
else
  err=$(python3 "$script" measure --quick 2>&1)
  [ $? -eq 2 ] && grep -qE "needs PyTorch|no CUDA device" <<<"$err" ||
    fail "measure without CUDA: $err"
fi
if python3 -c "import torch" 2>/dev/null; then
  python3 "$script" measure --device cpu --quick --json "$dir/q.json" >/dev/null ||
    fail "measure --device cpu --quick exited non-zero"
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d['runs']) == 3 and all(r['step_ms'] > 0 for r in d['runs']), d['runs']
" "$dir/q.json" || fail "measure --quick wrote no three timed runs"
fi
finish
