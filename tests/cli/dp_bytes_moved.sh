#!/usr/bin/env bash
# Bytes a rank moves across ranks (sent, or read in place from a peer's memory: docs/algorithms.md
# "Bytes moved") in `train`'s report: with the direct algorithm (the threads backend's default on
# one node) ZeRO's reduce-scatters and gathers only read their peers' buffers, and still move
# their bytes. At dp 2 with Psi parameters of 4 bytes, every rank moves 2 x (N-1)/N x 4 Psi = 4 Psi
# bytes per step at ZeRO 0-2 (an all-reduce, or a reduce-scatter and an all-gather) and 1.5x that,
# 6 Psi, at ZeRO 3 (the gathers before the forward and the backward, and the reduce-scatter),
# whichever the algorithm; the plan's figure equals the counter.
# Usage: dp_bytes_moved.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

check='
import json, sys
zero, algo = int(sys.argv[1]), sys.argv[2]
layout = json.load(sys.stdin)["layout"]
ok = layout["dp_algo"] == algo and layout["bytes_convention"].startswith("moved")
for r in layout["ranks"]:
    want = (6 if zero == 3 else 4) * r["param_count"]
    got, plan = r["bytes_per_step"]["dp"], r["plan_bytes_per_step"]["dp"]
    if got != want or plan != want:
        print("rank", r["rank"], "DP bytes", got, "plan", plan, "want", want)
        ok = False
sys.exit(0 if ok else 1)
'
for algo in direct ring; do
  for zero in 0 1 2 3; do
    json=$("$DTRAIN" train --model bench --steps 1 --dp 2 --zero $zero --dp-algo $algo --json 2>/dev/null) ||
      { fail "train --dp 2 --zero $zero --dp-algo $algo exited $?"; continue; }
    if python3 -c "$check" "$zero" "$algo" <<<"$json"; then
      echo "ok: --zero $zero --dp-algo $algo: DP bytes = plan = $([ $zero = 3 ] && echo 6 || echo 4) x params"
    else
      fail "--zero $zero --dp-algo $algo"
    fi
  done
done
finish
