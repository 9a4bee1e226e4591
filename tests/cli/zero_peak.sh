#!/usr/bin/env bash
# The planned rank peak (what --max-rank-memory checks) against the measured one under ZeRO-2 and
# EP: ZeRO-2 binds each gradient bucket at full size in fp32 until its reduce-scatter, beside the
# gradient shard; EP shards the experts over the expert-DP group, the rest over DP. On a model
# whose gradients are one bucket (nothing left reducing when another binds), rank 0's peak equals
# the plan to the byte, but for the collectives' scratch. Usage: zero_peak.sh path/to/dtrain
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
# The scratch of the collectives (the communication tag) is not in the plan (--max-rank-memory
# checks the measured peak after each step for it): on 4 ranks it is held for the whole run, so
# it is in the peak; where a collective borrows some only for a while, the peak may or may not
# meet it. So the plan must lie within that scratch below the peak, to the byte when
# there is none.
scratch = m["communication"]["peak_bytes"]
assert plan <= peak <= plan + scratch, f"measured peak {peak}, plan {plan}, scratch {scratch}"
print(f"measured peak {peak} bytes = plan {plan:.0f} + {peak - plan:.0f} of the {scratch} bytes "
      "of scratch")' "$layout" 2>&1); then
    echo "ok: $layout: $got"
  else
    fail "$layout: $got"
  fi
done
finish
