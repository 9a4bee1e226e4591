#!/usr/bin/env bash
# `dtrain train --metrics FILE.jsonl` and `dtrain plot`: the file starts with the run record,
# then holds a line per step whose losses are the run's (the --json summary's) and a line per
# evaluation; the SVG parses as XML (Python's xml.etree) with one polyline per series, one point
# per line of the file, x rising with the step and y an exact affine image of the values (larger
# drawn higher); a resumed run appends; bad input names the flag or file.
# Usage: metrics_plot.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

"$DTRAIN" train --model tiny --steps 12 --eval-every 4 --metrics "$tmp/m.jsonl" --json \
  > "$tmp/summary.json" 2>/dev/null || { echo "FAIL: train --metrics"; exit 1; }
check "the metrics file holds the run record, every step and every evaluation of the run" \
  "$py" - "$tmp/m.jsonl" "$tmp/summary.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary = json.load(open(sys.argv[2]))
assert lines[0]["type"] == "run" and len(lines[0]["run"]["id"]) == 32, lines[0]
steps = [l for l in lines if l["type"] == "step"]
evals = [l for l in lines if l["type"] == "eval"]
assert [l["step"] for l in steps] == list(range(1, 13)), [l["step"] for l in steps]
assert [{"step": l["step"], "loss": l["loss"]} for l in steps] == summary["train_losses"], \
    "losses differ from the summary's"
assert [e["val_loss"] for e in evals] == [e["val_loss"] for e in summary["val_losses"]]
for l in steps:
    assert l["lr"] > 0 and l["grad_norm"] > 0 and l["tokens_per_s"] > 0, l
    assert l["memory_peak_bytes"] > 0 and l["step_ms"] > 0, l
    assert isinstance(l["page_faults"], int) and l["page_faults"] >= 0, l
PY

# check_svg FILE SERIES...: the chart's polylines against the metrics file.
check_svg() {
  "$py" - "$tmp/m.jsonl" "$@" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
metrics, svg, names = sys.argv[1], sys.argv[2], sys.argv[3:]
lines = [json.loads(l) for l in open(metrics)]
root = ET.parse(svg).getroot()
ns = "{http://www.w3.org/2000/svg}"
polylines = [p for p in root.iter(ns + "polyline") if p.get("class") == "series"]
assert [p.get("data-series") for p in polylines] == names, [p.get("data-series") for p in polylines]
for p in polylines:
    name = p.get("data-series")
    want = [(l["step"], l[name]) for l in lines if l["type"] in ("step", "eval") and name in l]
    pts = [tuple(map(float, xy.split(","))) for xy in p.get("points").split()]
    assert len(pts) == len(want), (name, len(pts), len(want))
    xs = [x for x, _ in pts]
    assert all(a < b for a, b in zip(xs, xs[1:])), (name, "x does not rise")
    # y = a * value + b with a < 0 (larger values higher), to the 0.01 px the file prints.
    (v0, y0), (v1, y1) = min(zip([v for _, v in want], [y for _, y in pts])), max(zip([v for _, v in want], [y for _, y in pts]))
    if v1 != v0:
        a = (y1 - y0) / (v1 - v0)
        assert a < 0, (name, "larger values are not drawn higher")
        for (_, v), (_, y) in zip(want, pts):
            assert abs(y0 + a * (v - v0) - y) < 0.02, (name, v, y)
print("checked", len(polylines), "polylines")
PY
}
"$DTRAIN" plot "$tmp/m.jsonl" --output "$tmp/loss.svg" > /dev/null
check "plot draws loss and val_loss by default" check_svg "$tmp/loss.svg" loss val_loss
"$DTRAIN" plot "$tmp/m.jsonl" --output "$tmp/lr.svg" --series lr,grad_norm+step_ms,tokens_per_s > /dev/null
check "plot draws --series lr,grad_norm+step_ms,tokens_per_s" check_svg "$tmp/lr.svg" lr grad_norm step_ms tokens_per_s

# A resumed run appends its run record and steps to the same file.
"$DTRAIN" train --model tiny --steps 6 --eval-every 0 --save "$tmp/ck" --save-every 3 --metrics "$tmp/r.jsonl" > /dev/null 2>&1
"$DTRAIN" train --model tiny --steps 6 --eval-every 0 --resume "$tmp/ck/step-00000003" --metrics "$tmp/r.jsonl" > /dev/null 2>&1
check "a resume appends (2 run lines, steps 1-6 then 4-6)" "$py" -c "
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l['type'] for l in lines].count('run') == 2
assert [l['step'] for l in lines if l['type'] == 'step'] == [1, 2, 3, 4, 5, 6, 4, 5, 6]
" "$tmp/r.jsonl"

# Several runs in one chart, against steps or tokens: a second run at another learning rate;
# each panel holds every run's series, labelled "run: series", and --x tokens scales each run's
# steps by its own batch x seq (tiny: 8 x 32 = 256 tokens per step; the second run 4 x 32).
"$DTRAIN" train --model tiny --steps 8 --eval-every 4 --lr 1e-3 --global-batch 4 --metrics "$tmp/slow.jsonl" \
  > /dev/null 2>&1 || { echo "FAIL: second run"; failures=$((failures + 1)); }
"$DTRAIN" plot "$tmp/m.jsonl" "$tmp/slow.jsonl" --x tokens --output "$tmp/both.svg" > /dev/null
check "plot of two runs against tokens: a polyline per run and series, x = step x batch x seq" \
  "$py" - "$tmp/both.svg" "$tmp/m.jsonl" "$tmp/slow.jsonl" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
svg, runs = sys.argv[1], sys.argv[2:]
ns = "{http://www.w3.org/2000/svg}"
polylines = {p.get("data-series"): p for p in ET.parse(svg).getroot().iter(ns + "polyline")
             if p.get("class") == "series"}
assert sorted(polylines) == sorted(["m: loss", "m: val_loss", "slow: loss", "slow: val_loss"]), sorted(polylines)
# The x pixel is an affine image of tokens shared by both runs: the two runs' last training
# points (12 x 256 = 3072 and 8 x 128 = 1024 tokens) and first (256 and 128) fix it.
def xs(name):
    return [float(xy.split(",")[0]) for xy in polylines[name].get("points").split()]
tokens = {"m": [256 * s for s in range(1, 13)], "slow": [128 * s for s in range(1, 9)]}
(t0, x0), (t1, x1) = (tokens["slow"][0], xs("slow: loss")[0]), (tokens["m"][-1], xs("m: loss")[-1])
a = (x1 - x0) / (t1 - t0)
for run in ("m", "slow"):
    for t, x in zip(tokens[run], xs(run + ": loss")):
        assert abs(x0 + a * (t - t0) - x) < 0.02, (run, t, x)
print("checked", len(polylines), "polylines")
PY
expect_error "--x: .*not in" plot "$tmp/m.jsonl" --output "$tmp/x.svg" --x time

expect_error "--metrics|$tmp|is a directory" train --model tiny --steps 1 --metrics "$tmp"
expect_error "$tmp/none.jsonl|no such file" plot "$tmp/none.jsonl" --output "$tmp/x.svg"
expect_error "--output" plot "$tmp/m.jsonl"
expect_error "no step or eval line has \"nope\"|grad_norm" plot "$tmp/m.jsonl" --output "$tmp/x.svg" --series nope
echo 'not json' > "$tmp/bad.jsonl"
expect_error "$tmp/bad.jsonl:1|not a JSON object" plot "$tmp/bad.jsonl" --output "$tmp/x.svg"
expect_output 'metrics' train --help
expect_output 'SVG' plot --help
finish
