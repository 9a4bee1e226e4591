#!/usr/bin/env bash
# `dtrain train --cp 2 --trace`: each rank's CP exchanges (ring hops, the K/V gather and dK/dV
# reduce-scatter, Ulysses's all-to-alls) on a track of their own ("rank r (...) cp", tid 4r+3),
# one event per message: per rank as many as plan/'s messages per layer x layers x micro-batches
# (worked by hand below, and as the report's formula figure), their bytes summing to the CP
# counters' bytes per step, which equal plan/'s; and under --precision bf16 the K/V events carry
# half the bytes (K/V on the wire in bf16, dK/dV in fp32). Usage: cp_trace.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# L = 2 layers, M = 2 micro-batches of 1 row, T = 16 tokens over cp 2.
run=(train --model tiny --layers 2 --context 16 --seq-length 16 --global-batch 2 --microbatches 2 --steps 2 --cp 2)
# Messages per layer and micro-batch at cp N = 2: ring N-1 forward hops + N backward hops;
# all-gather one gather + one reduce-scatter; ulysses 4 all-to-alls each way.
declare -A per_layer=([ring]=3 [all-gather]=2 [ulysses]=8)
for precision in fp32 bf16; do
  for algo in ring all-gather ulysses; do
    name="$algo-$precision"
    if ! "$DTRAIN" "${run[@]}" --cp-algo "$algo" --precision "$precision" \
      --trace "$tmp/$name.trace.json" --json > "$tmp/$name.json" 2> "$tmp/$name.err"; then
      fail "--cp 2 --cp-algo $algo --precision $precision --trace exited non-zero: $(head -3 "$tmp/$name.err")"
      continue
    fi
    python3 - "$tmp/$name.trace.json" "$tmp/$name.json" "${per_layer[$algo]}" "$name" <<'PY' ||
import json, sys
trace, report, per_layer, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3]), sys.argv[4]
layers, microbatches = 2, 2
events = trace["traceEvents"]
rows = {r["rank"]: r for r in report["layout"]["cp_ranks"]}
assert sorted(rows) == [0, 1], rows
for rank, row in rows.items():
    tid = 4 * rank + 3
    names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] == tid]
    assert names and names[0].endswith(" cp"), (rank, names)
    mine = [e for e in events if e["ph"] == "X" and e["tid"] == tid]
    assert all(e["cat"] == "context_parallel" for e in mine), {e["cat"] for e in mine}
    # Nothing CP on another track, nothing else on this one.
    elsewhere = [e for e in events if e["ph"] == "X" and e["cat"] == "context_parallel" and e["tid"] != tid and e["tid"] // 4 == rank]
    assert not elsewhere, elsewhere[:2]
    count, total = len(mine), sum(e["args"]["bytes"] for e in mine)
    assert count == per_layer * layers * microbatches, (name, rank, count)
    assert count == row["messages_per_step_formula"] == row["messages_per_step"], (name, rank, count, row)
    assert total == row["bytes_per_step"] == row["bytes_per_step_formula"], (name, rank, total, row)
    if rank == 0:
        kinds = sorted({e["name"] for e in mine})
        print(f"ok: {name}: rank {rank} cp track {count} events = {per_layer} x {layers} layers x "
              f"{microbatches} micro-batches, {total} bytes = counters = plan; {kinds}")
PY
      fail "CP events of the $name trace"
  done
done
python3 - "$tmp" <<'PY' || fail "bf16 K/V on the wire"
import json, sys
def hops(name):
    t = json.load(open(f"{sys.argv[1]}/{name}.trace.json"))["traceEvents"]
    return [e["args"]["bytes"] for e in t if e["ph"] == "X" and e["tid"] == 3 and e["name"] == "ring hop K/V (forward)"]
fp32, bf16 = hops("ring-fp32"), hops("ring-bf16")
assert fp32 and len(fp32) == len(bf16) and all(2 * b == f for b, f in zip(bf16, fp32)), (fp32, bf16)
def total(name):
    return json.load(open(f"{sys.argv[1]}/{name}.json"))["layout"]["cp_ranks"][0]["bytes_per_step"]
print("ok: ring forward hop", fp32[0], "bytes in fp32,", bf16[0], "in bf16; CP bytes/step rank 0:",
      {n: total(n) for n in ("ring-fp32", "ring-bf16", "all-gather-fp32", "all-gather-bf16",
                             "ulysses-fp32", "ulysses-bf16")})
PY
finish
