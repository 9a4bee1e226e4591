#!/usr/bin/env bash
# The planned rank peak (what --max-rank-memory checks) against the measured one under ZeRO-2 and
# EP: ZeRO-2 binds each gradient bucket at full size in fp32 until its reduce-scatter, beside the
# gradient shard; EP shards the experts over the expert-DP group, the rest over DP. On a model
# whose gradients are one bucket (nothing left reducing when another binds), rank 0's peak less
# the collectives' scratch equals the plan to the byte. Usage: zero_peak.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
run=(train --model tiny --layers 4 --steps 2 --eval-every 0 --eval-batches 1 --json)

for layout in "--dp 2 --zero 2" "--dp 2 --zero 2 --experts 4 --top-k 2 --ep 2" \
  "--dp 2 --zero 1 --experts 4 --top-k 2 --ep 2" "--dp 4 --zero 2 --experts 4 --top-k 2 --ep 2"; do
  # shellcheck disable=SC2086
  if got=$("$DTRAIN" "${run[@]}" $layout 2>/dev/null | python3 -c '
import json, sys
m = json.load(sys.stdin)["memory"]
peak, plan = m["peak_total_bytes"], m["planned_peak_total_bytes"]
grads = m["grads"]
# ZeRO-2 holds a whole fp32 bucket above the shard at its peak: the plan must count it.
if "--zero 2" in sys.argv[1]:
    assert grads["peak_bytes"] > grads["current_bytes"], grads
# The scratch of the collectives (the communication tag, which the plan leaves out: --max-rank-memory
# checks the measured peak after each step for it) is held for the whole run on 4 ranks.
comm = m["communication"]
assert comm["current_bytes"] == comm["peak_bytes"], comm
assert peak - comm["peak_bytes"] == plan, f"measured peak {peak} - {comm} != plan {plan}"
scratch = comm["peak_bytes"]
print(f"measured peak {peak} bytes - communication {scratch} = plan")' "$layout"); then
    echo "ok: $layout: $got"
  else
    fail "$layout: $got"
  fi
done
finish
