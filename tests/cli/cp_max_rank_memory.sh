#!/usr/bin/env bash
# A run that only fits because of context parallelism (issue 33, item 6): at --seq-length 1024 a 2-block
# C=64 model's activations (4 heads of 1024 x 1024 scores per block) need 51.8 MiB on one rank by
# the plan/ formulas, over a 16 MiB --max-rank-memory; the other 2-rank cuts do not bring it under
# (--tp 2: 30.1 MiB, --pp 2: 30.0 MiB) and are refused too, naming the need and the cap. --cp 2
# (blockwise attention keeps no scores: 9.3 MiB) and --cp 2 --tp 2 (6.0 MiB) train, and each
# rank's measured peak stays under the cap and equals the plan's, printed beside it.
# Usage: cp_max_rank_memory.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

long=(train --layers 2 --hidden 64 --heads 4 --context 1024 --seq-length 1024 --global-batch 1 --steps 2
  --eval-every 0 --max-rank-memory 16MiB)
expect_error '--max-rank-memory 16.0 MiB: a rank of pipeline stage 0 needs 51.8 MiB by the plan/ formulas .* --cp' \
  "${long[@]}"
expect_error '--max-rank-memory 16.0 MiB: a rank of pipeline stage 0 needs 30.1 MiB' "${long[@]}" --tp 2
expect_error '--max-rank-memory 16.0 MiB: a rank of pipeline stage 1 needs 30.0 MiB' "${long[@]}" \
  --pp 2 --microbatches 1

expect_output 'total \(peak\) +9.32 MiB   \(plan/ 9.32 MiB' "${long[@]}" --cp 2

# peak_fits LAYOUT...: the run trains; rank 0's measured peak is under the cap and equals plan/'s.
peak_fits() {
  local got
  if got=$("$DTRAIN" "${long[@]}" "$@" --json 2> /dev/null | python3 -c '
import json, sys
m = json.load(sys.stdin)["memory"]
peak, plan, cap = m["peak_total_bytes"], m["planned_peak_total_bytes"], 16 * 2**20
assert 0 < peak <= cap, f"peak {peak} over the cap {cap}"
assert peak == plan, f"measured peak {peak} != plan {plan}"
print(f"measured peak {peak} bytes = plan {plan:.0f} <= cap {cap}")'); then
    echo "ok: $* trains: $got"
  else
    fail "$* under --max-rank-memory 16MiB: $got"
  fi
}
peak_fits --cp 2
peak_fits --cp 2 --tp 2
finish
