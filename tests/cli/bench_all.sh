#!/usr/bin/env bash
# `dtrain bench all` (a build with benchmarks), the CP and EP part only (the rest runs for
# minutes): not a timing test. The JSON names the CPU and its instructions, carries each CP
# algorithm's time ratio with the project's target (at most 1.2) and whether this run met it,
# the activation ratios and the EP ratios without a target; the table says how many targets were
# missed; an unknown --only is refused naming it. Usage: bench_all.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! "$DTRAIN" bench all --help > /dev/null 2>&1; then
  echo "skip: this build has no benchmarks"
  finish
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_output 'Run the benchmarks that carry a speed target' bench all --help
if "$DTRAIN" bench all --only cp,ep --json > "$tmp/all.json" 2> "$tmp/err"; then
  python3 - "$tmp/all.json" <<'PY' || fail "bench all figures"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["cpu"] and j["hardware_threads"] >= 1, j
assert isinstance(j["instructions"], list), j
benches = [f["bench"] for f in j["figures"]]
assert set(benches) == {"cp", "ep"}, benches
timed = [f for f in j["figures"] if f["bench"] == "cp" and "step time" in f["figure"]]
assert [t["figure"].split(", ")[1] for t in timed] == ["ring", "all-gather", "ulysses"], timed
for t in timed:
    assert t["want"] == "at_most" and t["target"] == 1.2 and t["value"] > 0, t
    assert t["met"] == (t["value"] <= 1.2), t
untargeted = [f for f in j["figures"] if "target" not in f]
assert len(untargeted) == 5 and all(f["value"] > 0 for f in untargeted), untargeted
assert j["missed"] == sum(1 for f in j["figures"] if f.get("met") is False), j
print("ok: bench all --only cp,ep: " + ", ".join(f"{t['value']:.2f}" for t in timed))
PY
else
  fail "bench all --only cp,ep --json exited non-zero: $(cat "$tmp/err")"
fi
expect_error "--only: no benchmark named 'speed'" bench all --only cp,speed
finish
