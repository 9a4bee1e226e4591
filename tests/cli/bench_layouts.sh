# `dtrain bench layouts --quick`: the report's structure, and every error, spread and group figure
# (the repeat-to-repeat rank correlation included) and the targets' verdicts recomputed here from
# the per-repeat predicted and measured numbers it prints (not from timing);
# no --cluster, one that is not a cluster file, or one without measured rates is refused with how
# to make one.
source "$(dirname "$0")/lib/expect.bash"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

expect_error "needs --cluster FILE.*dtrain calibrate" bench layouts --quick
expect_error "--cluster $dir/none.json: no such file" bench layouts --quick --cluster "$dir/none.json"
echo '{"name": "x"}' >"$dir/bad.json"
expect_error "--cluster $dir/bad.json: not a cluster file" bench layouts --quick --cluster "$dir/bad.json"

# A cluster file with links but not this machine's compute rates is refused by name.
"$DTRAIN" calibrate --ranks 4 --ranks-per-node 2 --seconds 0.05 --trials 1 --iterations 20 \
  -o "$dir/links.json" >/dev/null 2>&1 || fail "calibrate could not write a cluster file"
expect_error "--cluster $dir/links.json: has no field 'gpu.measured'" bench layouts --quick --cluster "$dir/links.json"

# A calibrated cluster file of this machine (2 emulated nodes of 2 threads: a dry run).
"$DTRAIN" calibrate --ranks 4 --ranks-per-node 2 --seconds 0.05 --trials 1 --iterations 20 \
  --compute --quick -o "$dir/cluster.json" >/dev/null 2>&1 || fail "calibrate could not write a cluster file"

expect_output "predicted ms +measured ms +error % +spread % +faults/step" bench layouts --quick --no-probe --cluster "$dir/cluster.json"
# Checked before any run (with --quick too, which then measures its one step whole).
expect_error "--warmup 4 leaves no step of --steps 4 to measure" bench layouts --quick --steps 4 \
  --warmup 4 --cluster "$dir/cluster.json"

"$DTRAIN" bench layouts --quick --repeats 3 --cluster "$dir/cluster.json" --json >"$dir/r.json" 2>"$dir/err.txt" ||
  fail "bench layouts --quick --json failed: $(tail -3 "$dir/err.txt")"
grep -q '^\[9/9\] ' "$dir/err.txt" || fail "expected 9 runs (3 layouts x 3 repeats) in the progress lines"
# Round-robin: the second run is the second layout's first repeat, not the first layout's second.
sed -n 2p "$dir/err.txt" | grep -q 'tp2' || fail "repeats are not interleaved: $(sed -n 2p "$dir/err.txt")"

python3 - "$dir/r.json" <<'PY' || fail "the JSON's figures do not follow from its repeats"
import json, math, statistics, sys
r = json.load(open(sys.argv[1]))
assert r["bench"] == "layouts" and r["repeats"] == 3 and r["steps"] == 1 and r["warmup"] == 0, r
L = r["layouts"]
assert len(L) == 3, len(L)
def close(a, b): return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
errs, speeds, adjusted = [], [], []
for l in L:
    for k in ("model", "ranks", "layout", "backend", "predicted_by"):
        assert k in l, k
    p, m = l["repeats_predicted_ms"], l["repeats_measured_ms"]
    assert len(p) == 3 and len(m) == 3
    assert close(l["predicted_ms"], statistics.median(p)), l
    assert close(l["measured_ms"], statistics.median(m)), l
    assert l["measured_ms"] > 0 and l["predicted_ms"] > 0
    e = 100 * (l["predicted_ms"] - l["measured_ms"]) / l["measured_ms"]
    assert close(l["error_pct"], e), (l["error_pct"], e)
    assert close(l["spread_pct"], 100 * (max(m) - min(m)) / statistics.median(m)), l
    # The measured step's page faults (train's --metrics page_faults), per repeat and their median.
    f = l["repeats_page_faults"]
    assert len(f) == 3 and all(x >= 0 for x in f), l
    assert close(l["page_faults_per_step"], statistics.median(f)), l
    # The slowest core's speed against the rates, per repeat (probed before and after the run),
    # and the prediction at that speed: the median of each repeat's prediction over its speed.
    c = l["repeats_core_speed"]
    assert len(c) == 3 and all(0 < x < 10 for x in c), l
    assert close(l["core_speed"], statistics.median(c)), l
    adj = statistics.median(x / v for x, v in zip(p, c))
    assert close(l["speed_adjusted_error_pct"], 100 * (adj - l["measured_ms"]) / l["measured_ms"]), l
    speeds.extend(c)
    adjusted.append(abs(l["speed_adjusted_error_pct"]))
    errs.append(abs(e))
s = r["summary"]
assert close(s["mean_abs_error_pct"], sum(errs) / len(errs)), s
cs = s["core_speed"]
assert close(cs["min"], min(speeds)) and close(cs["max"], max(speeds)), cs
assert close(cs["median"], statistics.median(speeds)), cs
assert close(cs["adjusted_mean_abs_error_pct"], sum(adjusted) / len(adjusted)), cs
assert close(cs["adjusted_worst_abs_error_pct"], max(adjusted)), cs
assert cs["largest_core_gap_pct"] >= 0, cs
assert close(s["worst_abs_error_pct"], max(errs)), s
assert close(abs(L[s["worst_layout"]]["error_pct"]), max(errs)), s
g = r["groups"]
assert len(g) == 1 and g[0]["model"] == "bench" and g[0]["ranks"] == 2 and g[0]["layouts"] == [0, 1, 2], g
g = g[0]
pred = [L[i]["predicted_ms"] for i in g["layouts"]]
meas = [L[i]["measured_ms"] for i in g["layouts"]]
assert g["top_pick"] == pred.index(min(pred)), g
assert g["measured_best"] == meas.index(min(meas)), g
assert close(g["top_pick_slower_pct"], 100 * (meas[g["top_pick"]] / min(meas) - 1)), g
def ranks(v):
    o = sorted(range(len(v)), key=lambda i: v[i]); rk = [0] * len(v)
    for pos, i in enumerate(o): rk[i] = pos + 1
    return rk
rp, rm = ranks(pred), ranks(meas)
n = len(rp)
rho = 1 - 6 * sum((a - b) ** 2 for a, b in zip(rp, rm)) / (n * (n * n - 1))
assert close(g["rank_correlation"], rho), (g["rank_correlation"], rho)
def spearman(x, y):
    rx, ry = ranks(x), ranks(y)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry)) / (n * (n * n - 1))
rep = [L[i]["repeats_measured_ms"] for i in g["layouts"]]
pairs = [spearman([x[a] for x in rep], [x[b] for x in rep]) for a in range(3) for b in range(a + 1, 3)]
assert close(g["repeat_rank_correlation"], sum(pairs) / len(pairs)), (g["repeat_rank_correlation"], pairs)
# The targets: the scope of every layout repeats the summary and the group, its verdicts follow
# from the floors and goals printed beside them; a group whose ranks outnumber the machine's cores
# would split the scopes in three.
assert r["cores"] >= 1 and g["fits_cores"] == (g["ranks"] <= r["cores"]), (r["cores"], g)
sc = s["scopes"]
assert len(sc) == (1 if g["fits_cores"] else 3) and sc[0]["scope"] == "all", sc
a = sc[0]
assert a["layouts"] == 3 and a["groups"] == 1, a
assert close(a["mean_abs_error_pct"], s["mean_abs_error_pct"]), a
assert close(a["worst_abs_error_pct"], s["worst_abs_error_pct"]), a
assert close(a["p90_abs_error_pct"], s["p90_abs_error_pct"]), a
assert close(a["lowest_rank_correlation"], g["rank_correlation"]), a
assert close(a["slowest_top_pick_pct"], g["top_pick_slower_pct"]), a
assert a["repeats_below_floor"] == int(g["repeat_rank_correlation"] < 0.8), a
for kind, verdict in (("floors", a["meets_floors"]), ("goals", a["meets_goals"])):
    t = r["targets"][kind]
    def at_most(x, target): return target is None or x <= target
    want = {"mean_abs_error": at_most(a["mean_abs_error_pct"], t["mean_abs_error_pct"]),
            "p90_abs_error": at_most(a["p90_abs_error_pct"], t["p90_abs_error_pct"]),
            "worst_abs_error": at_most(a["worst_abs_error_pct"], t["worst_abs_error_pct"]),
            "rank_correlation": a["lowest_rank_correlation"] >= t["rank_correlation"],
            "top_pick_slower": at_most(a["slowest_top_pick_pct"], t["top_pick_slower_pct"])}
    want["all"] = all(want.values())
    assert verdict == want, (kind, verdict, want)
PY

# --no-probe: no core speeds anywhere in the report.
"$DTRAIN" bench layouts --quick --no-probe --cluster "$dir/cluster.json" --json >"$dir/n.json" 2>"$dir/err.txt" ||
  fail "bench layouts --quick --no-probe failed: $(tail -3 "$dir/err.txt")"
python3 - "$dir/n.json" <<'PY' || fail "--no-probe still reports core speeds"
import json, sys
r = json.load(open(sys.argv[1]))
assert "core_speed" not in r["summary"], r["summary"]
assert all("core_speed" not in l and "repeats_core_speed" not in l for l in r["layouts"]), r["layouts"]
PY
expect_output "core speed +at that speed %" bench layouts --quick --cluster "$dir/cluster.json"

# --only: the CP and MoE groups alone (quick: one layout each), ranked in groups of their own; an
# unknown group is refused by name.
expect_error "--only xyz: no such group \(dense, cp, moe\)" bench layouts --quick --only xyz --cluster "$dir/cluster.json"
"$DTRAIN" bench layouts --quick --only cp,moe --cluster "$dir/cluster.json" --json >"$dir/g.json" 2>"$dir/err.txt" ||
  fail "bench layouts --quick --only cp,moe failed: $(tail -3 "$dir/err.txt")"
python3 - "$dir/g.json" <<'PY' || fail "--only cp,moe: wrong layouts or groups"
import json, sys
r = json.load(open(sys.argv[1]))
L = r["layouts"]
assert [l["group"] for l in L] == ["cp", "moe"], L
assert L[0]["cp"] == 2 and L[0]["cp_algo"] == "ring" and L[0]["layout"].startswith("cp2 ring"), L[0]
assert L[1]["experts"] == 4 and L[1]["ep"] == 2 and "ep2" in L[1]["layout"], L[1]
assert all(l["predicted_ms"] > 0 and l["predicted_by"] == "clock" for l in L), L
assert [(g["kind"], g["layouts"]) for g in r["groups"]] == [("cp", [0]), ("moe", [1])], r["groups"]
# The MoE layout is priced again on its run's routing; the CP one is not.
import math, statistics
assert "given_routing_ms" not in L[0] and "given_routing" not in r["groups"][0], L[0]
m = L[1]
assert len(m["repeats_given_routing_ms"]) == len(m["repeats_measured_ms"]), m
assert math.isclose(m["given_routing_ms"], statistics.median(m["repeats_given_routing_ms"]))
e = 100 * (m["given_routing_ms"] - m["measured_ms"]) / m["measured_ms"]
assert math.isclose(m["given_routing_error_pct"], e, rel_tol=1e-9, abs_tol=1e-9), (m, e)
s = r["summary"]["moe"]
assert s["layouts"] == 1 and math.isclose(s["given_routing_worst_abs_error_pct"], abs(e)), s
assert math.isclose(s["worst_abs_error_pct"], abs(m["error_pct"])), s
assert r["groups"][1]["given_routing"]["top_pick"] == 1, r["groups"][1]
PY
expect_output "MoE layouts priced again on the routing each run measured" \
  bench layouts --quick --only moe --cluster "$dir/cluster.json"

finish
